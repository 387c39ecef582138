// tokenizer.json "pre_tokenizer": Split (regex or literal pattern, behaviour Isolated), ByteLevel (with
// add_prefix_space / use_regex), or a Sequence of them. A ByteLevel step is required: the model is byte-level.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/split_regex.h"

namespace lily {

class PreTokenizer {
 public:
  // Throws lily::Error naming an unsupported type or option. `engine` picks the split engine (tests use Icu to
  // compare the two).
  static PreTokenizer from_json(const nlohmann::json& j, SplitEngine engine = SplitEngine::Auto);

  // Cuts normalized text into pre-tokens (raw bytes, before the byte alphabet) and appends them to out.
  void apply(std::string_view text, std::vector<std::string>& out) const;

  const std::string& split_regex() const { return split_regex_; }  // the first regex in the chain ("" if none)
  const char* split_engine() const;

 private:
  struct Step {
    std::unique_ptr<RegexSplitter> splitter;  // null: ByteLevel without use_regex
    bool add_prefix_space = false;            // ByteLevel only
  };
  static void add(const nlohmann::json& j, SplitEngine engine, PreTokenizer& p);

  std::vector<Step> steps_;
  bool has_byte_level_ = false;
  std::string split_regex_;
};

}  // namespace lily
