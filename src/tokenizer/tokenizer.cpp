#include "tokenizer/tokenizer.h"

#include "io/text_file.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace lily {

namespace {

bool opt_bool(const nlohmann::json& j, const char* k, bool def, const std::string& where) {
  if (!j.contains(k) || j[k].is_null()) return def;
  if (!j[k].is_boolean()) throw Error(where + " field \"" + k + "\" must be a boolean");
  return j[k].get<bool>();
}

void check_decoder(const nlohmann::json& d) {
  if (d.is_null()) throw Error("tokenizer.json: \"decoder\" is null; a ByteLevel decoder is required");
  if (!d.is_object() || !d.contains("type") || !d["type"].is_string())
    throw Error("tokenizer.json: \"decoder\" must be an object with a string \"type\"");
  std::string type = d["type"].get<std::string>();
  if (type == "Sequence" && d.contains("decoders") && d["decoders"].is_array() && d["decoders"].size() == 1) {
    check_decoder(d["decoders"][0]);
    return;
  }
  if (type != "ByteLevel") throw Error("tokenizer.json: unsupported decoder type \"" + type + "\" (only ByteLevel)");
}

}  // namespace

std::unique_ptr<TokenizerImpl> TokenizerImpl::from_json(const nlohmann::json& j, SplitEngine engine) {
  if (!j.is_object()) throw Error("tokenizer.json: the top level is not a JSON object");
  if (!j.contains("model")) throw Error("tokenizer.json: missing \"model\"");
  auto t = std::make_unique<TokenizerImpl>();
  t->model = BpeModel::from_json(j["model"]);
  t->normalizer = Normalizer::from_json(j.contains("normalizer") ? j["normalizer"] : nlohmann::json());
  if (!j.contains("pre_tokenizer")) throw Error("tokenizer.json: missing \"pre_tokenizer\"");
  t->pre = PreTokenizer::from_json(j["pre_tokenizer"], engine);
  check_decoder(j.contains("decoder") ? j["decoder"] : nlohmann::json());

  int64_t max_id = t->model.max_id();
  if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
    const auto& arr = j["added_tokens"];
    if (!arr.is_array()) throw Error("tokenizer.json: \"added_tokens\" must be an array");
    for (size_t i = 0; i < arr.size(); ++i) {
      const auto& a = arr[i];
      std::string where = "tokenizer.json: added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") ||
          !a["content"].is_string())
        throw Error(where + " needs an integer \"id\" and a string \"content\"");
      AddedToken tok;
      int64_t id = a["id"].get<int64_t>();
      if (id < 0 || id > (1 << 26)) throw Error(where + " has id " + std::to_string(id) + " out of range");
      tok.id = static_cast<int32_t>(id);
      tok.content = a["content"].get<std::string>();
      if (utf8::first_invalid(tok.content) != std::string::npos) throw Error(where + " content is not valid UTF-8");
      tok.special = opt_bool(a, "special", false, where);
      tok.lstrip = opt_bool(a, "lstrip", false, where);
      tok.rstrip = opt_bool(a, "rstrip", false, where);
      tok.single_word = opt_bool(a, "single_word", false, where);
      tok.normalized = opt_bool(a, "normalized", !tok.special, where);
      max_id = std::max(max_id, id);
      t->added_by_content[tok.content] = tok.id;
      t->added_by_id[tok.id] = t->added.size();
      t->added.push_back(std::move(tok));
    }
  }
  for (const auto& tok : t->added) {
    if (tok.normalized && !t->normalizer.empty())
      t->norm_matcher.add(tok, t->normalizer.apply(tok.content));
    else if (tok.normalized)
      t->norm_matcher.add(tok, tok.content);
    else
      t->raw_matcher.add(tok, tok.content);
  }
  t->vocab_size = static_cast<size_t>(max_id + 1);
  return t;
}

void TokenizerImpl::encode_plain(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized = normalizer.apply(text);
  std::vector<Segment> segs;
  if (norm_matcher.empty()) {
    segs.push_back({0, normalized.size(), -1});
  } else {
    norm_matcher.split(normalized, segs);
  }
  std::vector<std::string> pieces;
  for (const auto& s : segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
      continue;
    }
    pieces.clear();
    pre.apply(std::string_view(normalized).substr(s.begin, s.end - s.begin), pieces);
    for (const auto& p : pieces) model.encode_word(p, out);
  }
}

std::vector<int32_t> TokenizerImpl::encode(std::string_view text, const std::vector<size_t>* literal_at) const {
  if (text.size() > static_cast<size_t>(INT32_MAX) / 4) throw Error("encode: text of " + std::to_string(text.size()) + " bytes is too long");
  size_t bad = utf8::first_invalid(text);
  if (bad != std::string_view::npos) throw Error("encode: text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (text.empty()) return out;
  std::vector<Segment> segs;
  if (raw_matcher.empty()) {
    segs.push_back({0, text.size(), -1});
  } else {
    raw_matcher.split(text, segs);
  }
  if (literal_at && !literal_at->empty()) {
    // Special tokens at the given offsets become text: merged with the text around them, then encoded.
    std::vector<Segment> merged;
    for (const auto& s : segs) {
      auto at = std::lower_bound(literal_at->begin(), literal_at->end(), s.begin);
      const bool literal = s.id >= 0 && added[added_by_id.at(s.id)].special && at != literal_at->end() && *at < s.end;
      if (s.id >= 0 && !literal) {
        merged.push_back(s);
      } else if (!merged.empty() && merged.back().id < 0) {
        merged.back().end = s.end;
      } else {
        merged.push_back({s.begin, s.end, -1});
      }
    }
    segs.swap(merged);
  }
  for (const auto& s : segs) {
    if (s.id >= 0)
      out.push_back(s.id);
    else
      encode_plain(text.substr(s.begin, s.end - s.begin), out);
  }
  return out;
}

const std::string* TokenizerImpl::bytes_of(int32_t id) const {
  auto it = added_by_id.find(id);
  if (it != added_by_id.end()) return &added[it->second].content;  // added tokens decode to their content
  return model.bytes_of(id);
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::shared_ptr<Tokenizer> Tokenizer::from_json_text(std::string_view json_text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": invalid JSON: " + e.what());
  }
  try {
    return std::make_shared<Tokenizer>(TokenizerImpl::from_json(j, SplitEngine::Auto));
  } catch (const Error& e) {
    throw Error(source + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw Error(source + ": unexpected JSON content: " + e.what());
  }
}

std::shared_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  return from_json_text(read_text_file(path, kMaxTokenizerFileBytes), path);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return impl_->encode(text); }

std::vector<int32_t> Tokenizer::encode(std::string_view text, const std::vector<size_t>& literal_at) const {
  return impl_->encode(text, &literal_at);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string bytes;
  for (int32_t id : ids) {
    const std::string* b = impl_->bytes_of(id);
    if (b) bytes += *b;  // unknown ids are skipped, as HF does
  }
  return utf8::lossy(bytes);
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const std::string* b = impl_->bytes_of(id);
  return b ? *b : std::string();
}

int32_t Tokenizer::token_to_id(std::string_view content) const {
  auto it = impl_->added_by_content.find(std::string(content));
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model.id_of_spelling(content);
}

size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

bool Tokenizer::is_special(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

size_t Tokenizer::max_token_bytes() const {
  size_t m = 1;
  for (size_t id = 0; id < impl_->vocab_size; ++id)
    if (const std::string* b = impl_->bytes_of(static_cast<int32_t>(id))) m = std::max(m, b->size());
  return m;
}

std::vector<std::string> Tokenizer::special_tokens() const {
  std::vector<std::string> out;
  for (const auto& t : impl_->added)
    if (t.special) out.push_back(t.content);
  return out;
}

const std::string& Tokenizer::split_regex() const { return impl_->pre.split_regex(); }

const char* Tokenizer::split_engine() const { return impl_->pre.split_engine(); }

StreamDecoder::StreamDecoder(const Tokenizer& t) : tok_(t) {}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_.token_bytes(id);
  std::string out;
  size_t used = utf8::lossy_prefix(pending_, out);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8::lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace lily
