// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json, reproducing HF `tokenizers`: added tokens
// matched in the raw text first, then NFC, the pre-tokenizer regex split, the GPT-2 byte alphabet and BPE by
// merge rank. Decoding is lossy UTF-8 like HF decode(); StreamDecoder does the same incrementally.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lily {

class TokenizerImpl;

class Tokenizer {
 public:
  static std::shared_ptr<Tokenizer> load(const std::string& tokenizer_json_path);  // throws lily::Error
  // The same from the JSON text itself; `source` names it in error messages.
  static std::shared_ptr<Tokenizer> from_json_text(std::string_view json_text, const std::string& source);

  std::vector<int32_t> encode(std::string_view text) const;   // added tokens recognised, no BOS
  // The same, except that a special token (special=true) starting at one of the byte offsets in
  // `literal_at` (sorted) is encoded as ordinary text, the way it is spelled: text a user typed.
  std::vector<int32_t> encode(std::string_view text, const std::vector<size_t>& literal_at) const;
  std::string decode(const std::vector<int32_t>& ids) const;  // lossy UTF-8 like HF decode()
  std::string token_bytes(int32_t id) const;                  // raw bytes of one token ("" if out of range)
  int32_t token_to_id(std::string_view token_content) const;  // vocab or added token; -1 if none
  size_t vocab_size() const;                                  // max id + 1
  bool is_special(int32_t id) const;                          // added token with special=true
  std::vector<std::string> special_tokens() const;            // spellings of the special=true added tokens
  size_t max_token_bytes() const;  // longest token in bytes: a text of N bytes has at least N / this tokens
  const std::string& split_regex() const;

  // Which split engine runs the regex: "qwen2", "qwen35" (hand-written) or "icu".
  const char* split_engine() const;

  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

 private:
  std::unique_ptr<TokenizerImpl> impl_;
};

class StreamDecoder {  // incremental detokenizer
 public:
  explicit StreamDecoder(const Tokenizer& t);
  std::string push(int32_t id);  // returns the complete UTF-8 text now available
  std::string flush();           // the rest (incomplete bytes -> U+FFFD)

 private:
  const Tokenizer& tok_;
  std::string pending_;  // bytes of an unfinished UTF-8 sequence
};

}  // namespace lily
