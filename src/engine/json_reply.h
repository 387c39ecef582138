// Token-level json_object constraint for a chat reply, on top of JsonConstraint (bytes): which tokens
// may come next so that the reply's content stays a prefix of one JSON object that can still be closed
// within the token budget.
//
// - Token text is the token's raw bytes, so tokens holding part of a UTF-8 character are judged byte by
//   byte. Tokens with no text (special tokens) are never allowed inside the reply; end-of-turn tokens
//   only once the object is complete (the generator ends the turn itself at that point).
// - Reasoning: when the reply opens inside a thinking block, tokens pass freely (end-of-turn excepted)
//   until the raw bytes spell "</think>"; the JSON starts with the bytes after it.
// - Budget: when the object is open, a token is refused if what it leaves cannot be closed within the
//   tokens left after it (JsonConstraint::min_close_bytes(), one token per byte: every byte is a token in
//   a byte-level vocabulary). So the object is always closed by the end of the budget; steered() tells
//   that this rule refused a token the syntax allowed, i.e. the reply was cut short.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/json_constraint.h"
#include "engine/json_schema.h"
#include "engine/vocab_trie.h"

namespace lily {

class JsonReplyGate {
 public:
  using TokenText = std::function<std::string(int32_t)>;  // a token's bytes; "" = never allowed

  // With `schema`, the JSON must match it (SchemaMatcher: compact JSON) instead of being any object.
  JsonReplyGate(TokenText text, std::vector<int32_t> end_ids, bool thinking_open,
                std::shared_ptr<const JsonSchema> schema = nullptr);

  // Starts a decode step with `budget` tokens left including this one. The budget rule applies from
  // steps whose start finds the JSON begun and closable within `budget`.
  void begin_step(int budget);
  // May `id` be the next token?
  bool allows(int32_t id);
  // Records the chosen token.
  void accept(int32_t id);
  // Every token's allows() at once, as a bitmask of mask_words(trie.vocab()) words (engine/vocab_trie.h): the
  // allowed-token mask of the step begun by begin_step, for a sampler that applies it to the whole vocabulary (the
  // CUDA step sampler). `trie` holds the same token texts as this gate's TokenText. Returns the number of allowed
  // tokens. Unlike allows(), which judges only the tokens a sampler asks about, steered() is set when the budget
  // rule refuses any token the syntax allows at this step.
  int allowed_mask(const VocabTrie& trie, uint32_t* words);

  bool in_json() const { return in_json_; }   // past the reasoning block (or there was none)
  bool complete() const { return in_json_ && body_.complete(); }
  bool steered() const { return steered_; }

  // The byte constraint on the JSON part: any object (JsonConstraint) or a schema (SchemaMatcher).
  struct Body {
    JsonConstraint json;
    std::optional<SchemaMatcher> schema;
    void advance(std::string_view b) { schema ? schema->advance(b) : json.advance(b); }
    bool failed() const { return schema ? schema->failed() : json.failed(); }
    bool complete() const { return schema ? schema->complete() : json.complete(); }
    int min_close_bytes() const { return schema ? schema->min_close_bytes() : json.min_close_bytes(); }
    bool operator==(const Body&) const = default;
  };
  const Body& body() const { return body_; }

 private:
  bool is_end(int32_t id) const;
  // Splits `bytes` at the end of "</think>" when the thinking block closes inside them: returns the
  // offset of the JSON part (npos when it stays in the reasoning) and the matcher state after it.
  size_t think_split(std::string_view bytes, size_t* match_out) const;

  TokenText text_;
  std::vector<int32_t> end_ids_;
  Body body_;
  bool in_json_;
  size_t think_match_ = 0;   // bytes of "</think>" matched so far
  bool budget_rule_ = false;
  int left_after_ = 0;       // tokens left after the one being chosen
  bool steered_ = false;
  std::vector<Body> walk_;      // allowed_mask's state per trie depth (kept: its storage is reused)
  std::vector<uint8_t> still_;  // allowed_mask: walk_[d] is the step's start state, which plain bytes leave as it is
};

}  // namespace lily
