#include "tokenizer/pretokenizer.h"

#include <cctype>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lily {

namespace {

bool flag(const nlohmann::json& j, const char* k, bool def) {
  if (!j.contains(k) || j[k].is_null()) return def;
  if (!j[k].is_boolean()) throw Error(std::string("tokenizer.json: pre_tokenizer field \"") + k + "\" must be a boolean");
  return j[k].get<bool>();
}

// A literal string as an ICU pattern: every ASCII punctuation char escaped.
std::string literal_pattern(const std::string& s) {
  std::string out;
  for (char c : s) {
    unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

void PreTokenizer::add(const nlohmann::json& j, SplitEngine engine, PreTokenizer& p) {
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("tokenizer.json: each pre_tokenizer must be an object with a string \"type\"");
  std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      throw Error("tokenizer.json: pre_tokenizer Sequence needs a \"pretokenizers\" array");
    for (const auto& s : j["pretokenizers"]) add(s, engine, p);
  } else if (type == "Split") {
    if (!j.contains("pattern") || !j["pattern"].is_object())
      throw Error("tokenizer.json: Split pre_tokenizer needs a \"pattern\" object");
    const auto& pat = j["pattern"];
    std::string regex;
    if (pat.contains("Regex") && pat["Regex"].is_string()) {
      regex = pat["Regex"].get<std::string>();
    } else if (pat.contains("String") && pat["String"].is_string()) {
      regex = literal_pattern(pat["String"].get<std::string>());
    } else {
      throw Error("tokenizer.json: Split pattern must be {\"Regex\": string} or {\"String\": string}");
    }
    std::string behavior = j.contains("behavior") && j["behavior"].is_string() ? j["behavior"].get<std::string>() : "";
    if (behavior != "Isolated")
      throw Error("tokenizer.json: Split behavior \"" + behavior + "\" is not supported (only Isolated)");
    if (flag(j, "invert", false)) throw Error("tokenizer.json: Split with invert=true is not supported");
    if (regex.empty()) throw Error("tokenizer.json: Split pattern is empty");
    Step s;
    s.splitter = make_regex_splitter(regex, engine);
    if (p.split_regex_.empty()) p.split_regex_ = regex;
    p.steps_.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    Step s;
    s.add_prefix_space = flag(j, "add_prefix_space", true);
    if (flag(j, "use_regex", true)) {
      s.splitter = make_regex_splitter(kGpt2SplitPattern, engine);
      if (p.split_regex_.empty()) p.split_regex_ = kGpt2SplitPattern;
    }
    p.has_byte_level_ = true;
    p.steps_.push_back(std::move(s));
  } else {
    throw Error("tokenizer.json: unsupported pre_tokenizer type \"" + type + "\" (supported: Split, ByteLevel, Sequence)");
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j, SplitEngine engine) {
  PreTokenizer p;
  if (!j.is_null()) add(j, engine, p);
  if (!p.has_byte_level_)
    throw Error("tokenizer.json: the pre_tokenizer has no ByteLevel step; only byte-level BPE tokenizers are supported");
  return p;
}

void PreTokenizer::apply(std::string_view text, std::vector<std::string>& out) const {
  std::vector<std::string> cur, next;
  cur.emplace_back(text);
  std::vector<Span> spans;
  for (const auto& s : steps_) {
    next.clear();
    for (auto& piece : cur) {
      if (s.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
      if (!s.splitter) {
        next.push_back(std::move(piece));
        continue;
      }
      spans.clear();
      s.splitter->split(piece, spans);
      for (const auto& [b, e] : spans) next.emplace_back(piece, b, e - b);
    }
    cur.swap(next);
  }
  for (auto& piece : cur)
    if (!piece.empty()) out.push_back(std::move(piece));
}

const char* PreTokenizer::split_engine() const {
  for (const auto& s : steps_)
    if (s.splitter) return s.splitter->engine();
  return "none";
}

}  // namespace lily
