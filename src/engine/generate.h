// One generation request run to completion on the model: prefix-cache lookup, chunked prefill, sampling,
// incremental detokenisation, stop strings, reasoning/tool-call parsing, and cache snapshots at the end of
// the prompt and of the reply. Shared by the server's inference thread and `lily chat`.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "engine/backend.h"
#include "engine/json_reply.h"
#include "engine/json_schema.h"
#include "engine/vocab_trie.h"
#include "engine/sampler.h"
#include "tokenizer/tokenizer.h"

namespace lily {

class SessionCache;

struct GenJob {
  std::vector<int32_t> prompt;     // [n] full prompt ids, already including `forced_text`'s tokens
  int max_tokens = 16;             // >= 1; also bounded by the context
  SamplerParams sampling;
  std::vector<std::string> stop;   // stop strings
  bool chat = false;               // parse reasoning / tool calls (else raw text goes to content)
  ParserOptions parser;            // when chat
  std::string forced_text;         // chat: reply text the prompt already ends with (fed to the parser first)
  bool logprobs = false;           // report per-token logprobs
  bool single_tool_call = false;   // parallel_tool_calls=false: end after the first tool call
  // response_format json_object: the reply (after the reasoning block when parser.thinking_open_at_start)
  // is constrained to one JSON object (engine/json_reply.h); the turn ends as soon as it is closed.
  // finish_reason is "length" when the budget forced it closed early (or it could not be closed at all).
  bool json_object = false;
  // With json_object: the JSON must match this schema (response_format json_schema), in compact form.
  std::shared_ptr<const JsonSchema> json_schema;
  // With json_object, for a tool call forced as JSON (`forced_text` ends in "<tool_call>\n"): the JSON
  // starts right after forced_text (no reasoning block first), and `json_suffix` ("\n</tool_call>") is
  // fed to the output parser once the JSON is complete, so the call is parsed as one.
  bool json_after_forced = false;
  std::string json_suffix;
  // > 0 with chat and parser.thinking_open_at_start: after this many reply tokens without "</think>", the
  // reply is forced to close the block ("\n</think>\n\n" fed through the model) and goes on as the
  // answer (Anthropic thinking.budget_tokens). Such requests sample on the host.
  int thinking_budget = 0;
  std::string cache_key;           // prompt_cache_key
  // Extra prompt positions (0 < p < n) to snapshot during prefill, e.g. where the final assistant header
  // starts: the next turn of the conversation shares the prompt up to there even when the template
  // renders the reply differently from how it was generated.
  std::vector<int> snapshot_at;
};

struct TokenInfo {                 // one generated token's log-probabilities
  int32_t id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
};

struct GenChunk {                  // output released by one or more decode steps
  ParsedDelta delta;               // chat: split into reasoning/content/tool calls; else content only
  std::vector<TokenInfo> tokens;   // logprobs of the tokens released with this chunk (when asked)
};

struct GenResult {
  std::string finish_reason;       // stop | length | tool_calls
  std::string stop_string;         // the stop string that ended the reply ("" when none did)
  int prompt_tokens = 0;
  int cached_tokens = 0;           // prompt tokens resumed from the session cache
  int completion_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  int64_t mtp_drafted = 0, mtp_accepted = 0;  // speculative decoding: draft tokens proposed / kept
  bool mtp_switched_off = false;              // drafting stopped for this request (it did not pay)
  std::string content, reasoning;  // whole reply
  std::vector<ToolCallOut> tool_calls;
};

class Generator {
 public:
  // `cache` may be null (no reuse). `ctx`: capacity of every state this generator makes.
  Generator(Backend& be, const Tokenizer& tok, SessionCache* cache, int ctx, int prefill_chunk = 0);

  // Runs `job`; emit() receives output as it is released. Throws Cancelled when cancelled() turns true
  // (checked between prefill chunks and decode steps).
  GenResult run(const GenJob& job, const std::function<void(GenChunk&&)>& emit,
                const std::function<bool()>& cancelled);

  // Stores the state after the last run's prompt + reply (+ end-of-turn token) in the cache, for the next
  // turn of a conversation. Separate from run() so a server can answer first; no-op when nothing is pending.
  void save_reply_snapshot();

  // Speculative decoding with the checkpoint's MTP block: k draft tokens per step (0: off). Used by the requests
  // that take the backend's decode path (no logprobs, no JSON constraint, no thinking budget). Throws when k > 0
  // and the backend has no MTP.
  void set_mtp(int k);
  int mtp() const { return mtp_k_; }

  int ctx() const { return ctx_; }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }

 private:
  Backend& be_;
  const Tokenizer& tok_;
  SessionCache* cache_;
  int ctx_;
  int prefill_chunk_;
  int mtp_k_ = 0;
  std::vector<int32_t> stop_ids_;  // end-of-turn / end-of-text ids
  JsonReplyGate::TokenText json_token_text() const;  // a token's bytes for the JSON gate ("" for special tokens)
  std::unique_ptr<VocabTrie> trie_;  // the vocabulary's texts (json_token_text), built on the first JSON request
  // Pending reply snapshot of the last run: state whose pos == reply_tokens_.size() - 1 (last not consumed), or
  // == reply_tokens_.size() with reply_logits_ the logits after the last token (decode_sample's lookahead).
  std::unique_ptr<SeqState> reply_state_;
  std::vector<float> reply_logits_;
  std::vector<int32_t> reply_tokens_;
  std::string reply_key_;
};

}  // namespace lily
