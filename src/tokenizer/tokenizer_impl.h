// Internals of Tokenizer (shared by tokenizer.cpp and tests that build a tokenizer with a chosen split engine).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"

namespace lily {

class TokenizerImpl {
 public:
  static std::unique_ptr<TokenizerImpl> from_json(const nlohmann::json& j, SplitEngine engine);

  // `literal_at` (sorted byte offsets, may be null): a special token matched at one of these offsets is
  // encoded as the plain text it is spelled with.
  std::vector<int32_t> encode(std::string_view text, const std::vector<size_t>* literal_at = nullptr) const;
  const std::string* bytes_of(int32_t id) const;  // raw bytes; nullptr for an unknown id

  BpeModel model;
  Normalizer normalizer;
  PreTokenizer pre;
  std::vector<AddedToken> added;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::unordered_map<int32_t, size_t> added_by_id;  // id -> index in `added`
  AddedTokenMatcher raw_matcher;   // tokens with normalized=false, matched in the raw text
  AddedTokenMatcher norm_matcher;  // tokens with normalized=true, matched in the normalized text
  size_t vocab_size = 0;

 private:
  void encode_plain(std::string_view text, std::vector<int32_t>& out) const;
};

}  // namespace lily
