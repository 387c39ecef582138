// Added tokens (tokenizer.json "added_tokens"): whole strings recognised in the text before the model sees it,
// as HF's AddedVocabulary does: leftmost match, longest at that position; optional lstrip/rstrip swallow the
// whitespace next to a match; single_word matches only between non-word characters.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lily {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;  // matched in the normalized text (else in the raw text)
};

// A piece of text: [begin, end) bytes; id >= 0 when it is an added token.
struct Segment {
  size_t begin, end;
  int32_t id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is what is searched for `tokens[i]` (its content, normalized for normalized tokens).
  void add(const AddedToken& t, std::string pattern);
  bool empty() const { return entries_.empty(); }
  // Splits `text` into added-token segments and the plain segments between them (non-empty ones only).
  void split(std::string_view text, std::vector<Segment>& out) const;

 private:
  struct Entry {
    std::string pattern;
    int32_t id;
    bool lstrip, rstrip, single_word;
  };
  std::vector<Entry> entries_;
  std::array<std::vector<uint32_t>, 256> by_first_byte_{};  // entry indexes, longest pattern first
};

}  // namespace lily
