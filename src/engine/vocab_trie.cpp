#include "engine/vocab_trie.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace lily {

VocabTrie::VocabTrie(const TokenText& text, int vocab) : vocab_(vocab) {
  std::vector<std::pair<std::string, int32_t>> toks;
  toks.reserve(static_cast<size_t>(vocab));
  for (int32_t id = 0; id < vocab; ++id) {
    std::string b = text(id);
    if (!b.empty()) toks.emplace_back(std::move(b), id);
  }
  std::sort(toks.begin(), toks.end());
  ids_.reserve(toks.size());
  std::vector<uint32_t> path;  // path[k]: the node at depth k + 1 of the current text
  std::vector<uint8_t> mixed;  // mixed[k]: the subtree of path[k] holds a byte that is not plain (so far)
  auto close_to = [&](size_t depth) {
    while (path.size() > depth) {
      Node& n = nodes_[path.back()];
      n.end = static_cast<uint32_t>(nodes_.size());
      n.sub_end = static_cast<uint32_t>(ids_.size());
      n.plain_sub = !mixed.back();
      path.pop_back();
      const bool m = mixed.back();
      mixed.pop_back();
      if (m && !mixed.empty()) mixed.back() = 1;
    }
  };
  const std::string* prev = nullptr;
  for (const auto& [s, id] : toks) {
    size_t lcp = 0;
    if (prev)
      while (lcp < s.size() && lcp < prev->size() && s[lcp] == (*prev)[lcp]) ++lcp;
    if (prev && lcp == s.size() && lcp == prev->size()) {  // the same text as the previous token
      ids_.push_back(id);
      nodes_[path.back()].tok_end = static_cast<uint32_t>(ids_.size());
      continue;
    }
    close_to(lcp);
    for (size_t k = lcp; k < s.size(); ++k) {
      Node n;
      n.byte = static_cast<uint8_t>(s[k]);
      n.depth = static_cast<uint32_t>(k + 1);
      n.tok_begin = n.tok_end = static_cast<uint32_t>(ids_.size());
      path.push_back(static_cast<uint32_t>(nodes_.size()));
      mixed.push_back(is_plain_byte(n.byte) ? 0 : 1);
      nodes_.push_back(n);
    }
    max_depth_ = std::max(max_depth_, static_cast<uint32_t>(s.size()));
    ids_.push_back(id);
    nodes_[path.back()].tok_end = static_cast<uint32_t>(ids_.size());
    prev = &s;
  }
  close_to(0);
}

void apply_token_mask(const float* logits, const uint32_t* words, int vocab, float* out) {
  for (int i = 0; i < vocab; ++i) out[i] = mask_bit(words, i) ? logits[i] : -std::numeric_limits<float>::infinity();
}

}  // namespace lily
