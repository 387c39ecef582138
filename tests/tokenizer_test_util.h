// Helpers for the tokenizer tests: fixture paths, JSONL cases, loading a tokenizer with a chosen split engine.
#pragma once
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"

namespace lily::test {

struct TokCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

inline std::string tiny_tokenizer_path() { return LILY_TEST_DIR "/fixtures/tiny/tokenizer.json"; }
inline std::string qwen3_tokenizer_path() { return LILY_BUILD_DIR "/testdata/qwen3-tokenizer/tokenizer.json"; }

inline bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::vector<TokCase> read_cases(const std::string& path) {
  std::vector<TokCase> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(), j["decoded"].get<std::string>()});
  }
  return out;
}

// The tokenizer.json text with the (first) Split regex replaced.
inline std::string with_split_regex(const std::string& json_text, const std::string& regex) {
  auto j = nlohmann::json::parse(json_text);
  auto& pre = j["pre_tokenizer"];
  if (pre["type"] == "Sequence") {
    for (auto& p : pre["pretokenizers"])
      if (p["type"] == "Split") {
        p["pattern"]["Regex"] = regex;
        break;
      }
  }
  return j.dump();
}

inline std::shared_ptr<Tokenizer> tokenizer_with_engine(const std::string& json_text, SplitEngine engine) {
  return std::make_shared<Tokenizer>(TokenizerImpl::from_json(nlohmann::json::parse(json_text), engine));
}

}  // namespace lily::test
