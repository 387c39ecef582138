// `lily tokenize`: encode text to ids (printed as a JSON list) or decode a comma-separated id list to text.
//   lily tokenize --tokenizer F.json --text T     lily tokenize --model DIR --text T   (DIR/tokenizer.json)
//   lily tokenize --model DIR --decode 9419,11
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/registry.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace lily {

namespace {

std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  size_t p = 0;
  while (p <= s.size()) {
    size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    std::string item = s.substr(p, q - p);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    errno = 0;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || errno || v < 0 || v > INT32_MAX)
      throw Error("--decode expects comma-separated token ids, got '" + item + "'");
    ids.push_back(static_cast<int32_t>(v));
    p = q + 1;
  }
  return ids;
}

int run_tokenize(const Args& a) {
  a.check_known({"tokenizer", "model", "text", "decode"});
  std::string path;
  if (a.has("tokenizer")) {
    path = a.get("tokenizer");
  } else if (a.has("model")) {
    path = a.get("model") + "/tokenizer.json";
  } else {
    throw Error("give --tokenizer FILE.json or --model DIR");
  }
  if (a.has("text") == a.has("decode")) throw Error("give exactly one of --text TEXT or --decode ID,ID,...");
  auto tok = Tokenizer::load(path);
  if (a.has("decode")) {
    std::vector<int32_t> ids = parse_id_list(a.get("decode"));
    for (int32_t id : ids)
      if (static_cast<size_t>(id) >= tok->vocab_size())
        throw Error("token id " + std::to_string(id) + " is out of range for " + path + " (vocab size " +
                    std::to_string(tok->vocab_size()) + ")");
    std::string text = tok->decode(ids);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  std::vector<int32_t> ids = tok->encode(a.get("text"));
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ids[i]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

LILY_COMMAND("tokenize", "encode --text to token ids, or --decode ids to text (--tokenizer F or --model DIR)",
             run_tokenize, {});

}  // namespace lily
