#include "engine/session_cache.h"

#include <algorithm>

namespace lily {

CacheHit SessionCache::lookup(const std::vector<int32_t>& tokens, const std::string& key, int max_ctx) {
  auto best = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto& t = it->tokens;
    if (t.empty() || t.size() > tokens.size() || it->state->max_ctx < max_ctx) continue;
    if (best != entries_.end()) {
      const size_t bl = best->tokens.size();
      const bool better = t.size() > bl || (t.size() == bl && !key.empty() && it->key == key && best->key != key);
      if (!better) continue;
    }
    if (!std::equal(t.begin(), t.end(), tokens.begin())) continue;
    best = it;
  }
  CacheHit h;
  if (best == entries_.end()) return h;
  entries_.splice(entries_.begin(), entries_, best);  // now most recently used
  h.state = best->state->clone();
  h.logits = best->logits;
  h.n_tokens = static_cast<int>(best->tokens.size());
  return h;
}

bool SessionCache::insert(const std::vector<int32_t>& tokens, const std::string& key, const SeqState& st,
                          std::vector<float> logits) {
  if (tokens.empty() || st.pos != static_cast<int>(tokens.size())) return false;
  const size_t b = st.bytes() + tokens.size() * sizeof(int32_t) + logits.size() * sizeof(float);
  for (auto it = entries_.begin(); it != entries_.end(); ++it)
    if (it->tokens == tokens) {
      bytes_ -= it->bytes;
      entries_.erase(it);
      break;
    }
  if (b > budget_) return false;
  evict_to(budget_ - b);
  entries_.push_front(Entry{tokens, key, st.clone(), std::move(logits), b});
  bytes_ += b;
  return true;
}

void SessionCache::evict_to(size_t limit) {
  while (bytes_ > limit && !entries_.empty()) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
  }
}

void SessionCache::clear() {
  entries_.clear();
  bytes_ = 0;
}

}  // namespace lily
