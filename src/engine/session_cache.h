// Session prefix cache: snapshots (SeqState::clone()) of the whole decode state at token boundaries
// (end of a prompt, end of a reply). A request whose tokens start with a snapshot's tokens resumes from a
// copy of it and prefills only the rest. Matching is exact token equality on whole snapshots only: the
// recurrent (DeltaNet) state cannot be rolled back to an earlier position. LRU within a byte budget.
// Not thread-safe: owned and used by the inference thread only.
#pragma once
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace lily {

struct CacheHit {
  std::unique_ptr<SeqState> state;  // a private copy, st->pos == n_tokens
  std::vector<float> logits;        // [vocab] logits after the snapshot's last token
  int n_tokens = 0;                 // prompt tokens covered by the snapshot
};

class SessionCache {
 public:
  explicit SessionCache(size_t budget_bytes) : budget_(budget_bytes) {}

  // Longest snapshot whose tokens are a prefix of `tokens` (a snapshot equal to all of `tokens` counts).
  // Among equal lengths one stored under `key` is preferred. Returns a hit with n_tokens == 0 on a miss.
  // `max_ctx`: the copy is only usable when its capacity is at least the context the caller needs.
  CacheHit lookup(const std::vector<int32_t>& tokens, const std::string& key, int max_ctx);

  // Stores a copy of `st` (whose pos must equal tokens.size()) with the logits of its last position.
  // Replaces a snapshot with identical tokens; evicts least recently used entries to fit the budget;
  // ignores snapshots larger than the whole budget. Returns whether it was stored.
  bool insert(const std::vector<int32_t>& tokens, const std::string& key, const SeqState& st,
              std::vector<float> logits);

  size_t bytes() const { return bytes_; }
  size_t size() const { return entries_.size(); }
  size_t budget() const { return budget_; }
  void clear();

 private:
  struct Entry {
    std::vector<int32_t> tokens;      // [n] tokens the state has consumed
    std::string key;                  // prompt_cache_key it was stored under ("" if none)
    std::unique_ptr<SeqState> state;  // owned snapshot
    std::vector<float> logits;        // [vocab]
    size_t bytes = 0;                 // state->bytes() + tokens + logits
  };
  void evict_to(size_t limit);

  size_t budget_;
  size_t bytes_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

}  // namespace lily
