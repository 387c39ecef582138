// tokenizer.ggml.* metadata -> tokenizer.json text -> Tokenizer.
#include "tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_writer.h"
#include "tokenizer/tokenizer.h"

namespace lily {

namespace {

const char* kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const GgufValue& need(const GgufModel& m, const std::string& key, GgufType arr_type) {
  const GgufValue* v = m.kv(key);
  if (!v) throw Error(m.first().path() + ": metadata key '" + key + "' is missing (the file carries no tokenizer)");
  if (v->type != GgufType::ARRAY || (arr_type == GgufType::STRING) != (v->arr_type == GgufType::STRING))
    throw Error(m.first().path() + ": metadata key '" + key + "': expected an array of " + gguf_type_name(arr_type));
  return *v;
}

}  // namespace

std::string gguf_tokenizer_json(const GgufModel& m) {
  const std::string& path = m.first().path();
  const std::string model = m.get_string("tokenizer.ggml.model");
  if (model != "gpt2")
    throw Error(path + ": tokenizer.ggml.model is '" + model + "'; only byte-level BPE ('gpt2') is supported");
  const std::string pre = m.kv("tokenizer.ggml.pre") ? m.get_string("tokenizer.ggml.pre") : "qwen35";
  const char* split = pre == "qwen35" ? kQwen35Split : pre == "qwen2" ? kQwen2Split : nullptr;
  if (!split) throw Error(path + ": tokenizer.ggml.pre '" + pre + "' is not supported (expected qwen35 or qwen2)");
  const GgufValue& tokens = need(m, "tokenizer.ggml.tokens", GgufType::STRING);
  const GgufValue& merges = need(m, "tokenizer.ggml.merges", GgufType::STRING);
  const GgufValue* types = m.kv("tokenizer.ggml.token_type");
  if (types && (types->type != GgufType::ARRAY || types->ints.size() != tokens.strs.size()))
    throw Error(path + ": metadata key 'tokenizer.ggml.token_type' must be an integer array as long as "
                "tokenizer.ggml.tokens (" + std::to_string(tokens.strs.size()) + ")");
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object(), added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tokens.strs.size(); ++i) {
    const int64_t t = types ? types->ints[i] : 1;
    const std::string& s = tokens.strs[i];
    if (t == 3 || t == 4) {
      // llama.cpp keeps no lstrip/rstrip/normalized flags: Qwen's added tokens have them all false.
      added.push_back({{"id", i}, {"content", s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", t == 3}});
    } else if (t == 1 || t == 6 || t == 2) {
      if (!vocab.contains(s)) vocab[s] = i;
    } else if (t != 5) {
      throw Error(path + ": tokenizer.ggml.token_type[" + std::to_string(i) + "] = " + std::to_string(t) +
                  " is not a known token type");
    }
  }
  nlohmann::ordered_json ml = nlohmann::ordered_json::array();
  for (size_t i = 0; i < merges.strs.size(); ++i) {
    const std::string& s = merges.strs[i];
    const size_t sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 >= s.size() || s.find(' ', sp + 1) != std::string::npos)
      throw Error(path + ": tokenizer.ggml.merges[" + std::to_string(i) + "] = '" + s +
                  "' is not two tokens separated by one space");
    ml.push_back({s.substr(0, sp), s.substr(sp + 1)});
  }
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}, {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["post_processor"] = nullptr;
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  j["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                {"ignore_merges", false}, {"vocab", vocab}, {"merges", ml}};
  return j.dump();
}

void gguf_add_tokenizer(const std::string& tokenizer_json, GgufWriter& w, const std::string& pre, int64_t vocab_size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("tokenizer.json: ") + e.what());
  }
  std::map<int64_t, std::pair<std::string, int32_t>> by_id;  // id -> (content, token type)
  for (const auto& [tok, id] : j.at("model").at("vocab").items()) by_id[id.get<int64_t>()] = {tok, 1};
  for (const auto& a : j.at("added_tokens")) by_id[a.at("id").get<int64_t>()] = {a.at("content"), a.at("special") ? 3 : 4};
  if (by_id.empty() || by_id.begin()->first < 0) throw Error("tokenizer.json: no tokens, or a negative id");
  const int64_t n = std::max(by_id.rbegin()->first + 1, vocab_size);
  std::vector<std::string> tokens(static_cast<size_t>(n));
  std::vector<int32_t> types(static_cast<size_t>(n), 5);
  for (int64_t i = 0; i < n; ++i) tokens[size_t(i)] = "[PAD" + std::to_string(i) + "]";
  for (const auto& [id, tt] : by_id) tokens[size_t(id)] = tt.first, types[size_t(id)] = tt.second;
  std::vector<std::string> merges;
  for (const auto& m : j.at("model").at("merges"))
    merges.push_back(m.is_string() ? m.get<std::string>() : m.at(0).get<std::string>() + " " + m.at(1).get<std::string>());
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", merges);
}

std::shared_ptr<Tokenizer> gguf_tokenizer(const GgufModel& m) {
  return Tokenizer::from_json_text(gguf_tokenizer_json(m), m.first().path() + " (tokenizer.ggml.*)");
}

std::string gguf_chat_template(const GgufModel& m) {
  return m.kv("tokenizer.chat_template") ? m.get_string("tokenizer.chat_template") : std::string();
}

}  // namespace lily
