#include "engine/json_reply.h"

#include <algorithm>

namespace lily {
namespace {
constexpr std::string_view kThinkClose = "</think>";
}  // namespace

JsonReplyGate::JsonReplyGate(TokenText text, std::vector<int32_t> end_ids, bool thinking_open,
                             std::shared_ptr<const JsonSchema> schema)
    : text_(std::move(text)), end_ids_(std::move(end_ids)), in_json_(!thinking_open) {
  if (schema) body_.schema.emplace(std::move(schema));
}

bool JsonReplyGate::is_end(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

void JsonReplyGate::begin_step(int budget) {
  left_after_ = budget - 1;
  budget_rule_ = in_json_ && body_.min_close_bytes() <= budget;
}

size_t JsonReplyGate::think_split(std::string_view bytes, size_t* match_out) const {
  size_t m = think_match_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // "</think>" has no proper prefix that is also a suffix of a longer matched part except "<".
    if (bytes[i] == kThinkClose[m]) {
      ++m;
    } else {
      m = bytes[i] == kThinkClose[0] ? 1 : 0;
    }
    if (m == kThinkClose.size()) {
      *match_out = m;
      return i + 1;
    }
  }
  *match_out = m;
  return std::string_view::npos;
}

bool JsonReplyGate::allows(int32_t id) {
  if (is_end(id)) return complete();
  const std::string bytes = text_(id);
  if (bytes.empty()) return false;
  std::string_view part = bytes;
  if (!in_json_) {
    size_t m = 0;
    const size_t at = think_split(part, &m);
    if (at == std::string_view::npos) return true;
    part.remove_prefix(at);
  }
  Body next = body_;
  next.advance(part);
  if (next.failed()) return false;
  if (budget_rule_ && next.min_close_bytes() > left_after_) {
    steered_ = true;
    return false;
  }
  return true;
}

void JsonReplyGate::accept(int32_t id) {
  if (is_end(id)) return;
  const std::string bytes = text_(id);
  std::string_view part = bytes;
  if (!in_json_) {
    size_t m = 0;
    const size_t at = think_split(part, &m);
    think_match_ = m;
    if (at == std::string_view::npos) return;
    in_json_ = true;
    part.remove_prefix(at);
  }
  body_.advance(part);
}

int JsonReplyGate::allowed_mask(const VocabTrie& trie, uint32_t* words) {
  std::fill(words, words + mask_words(trie.vocab()), 0u);
  const std::vector<VocabTrie::Node>& nodes = trie.nodes();
  const std::vector<int32_t>& ids = trie.ids();
  auto allow = [&](int32_t id) { words[id >> 5] |= 1u << (id & 31); };
  const size_t n_nodes = nodes.size();
  if (!in_json_) {
    // Reasoning: a token passes unless its bytes close the block; the few that do are judged one by one.
    std::vector<size_t> match(trie.max_depth() + 1, 0);
    match[0] = think_match_;
    for (size_t i = 0; i < n_nodes;) {
      const VocabTrie::Node& n = nodes[i];
      size_t m = match[n.depth - 1];
      const char c = static_cast<char>(n.byte);
      m = c == kThinkClose[m] ? m + 1 : c == kThinkClose[0] ? 1 : 0;
      if (m == kThinkClose.size()) {
        for (uint32_t t = n.tok_begin; t < n.sub_end; ++t)
          if (allows(ids[t])) allow(ids[t]);
        i = n.end;
        continue;
      }
      match[n.depth] = m;
      for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) allow(ids[t]);
      ++i;
    }
  } else {
    if (walk_.size() < trie.max_depth() + 1) walk_.resize(trie.max_depth() + 1);
    still_.assign(trie.max_depth() + 1, 0);
    walk_[0] = body_;
    // Inside a free string every plain byte leaves the state as it is: a subtree of plain bytes below such a state
    // is allowed or refused as a whole, in that state, without walking it (most of the vocabulary, in a string).
    bool still = true;
    for (int c = 0x20; c < 0x7f && still; ++c) {
      if (!is_plain_byte(uint8_t(c))) continue;
      Body t = body_;
      const char ch = static_cast<char>(c);
      t.advance(std::string_view(&ch, 1));
      still = t == body_;
    }
    still_[0] = still;
    auto closable = [&](const Body& b) { return !budget_rule_ || b.min_close_bytes() <= left_after_; };
    for (size_t i = 0; i < n_nodes;) {
      const VocabTrie::Node& n = nodes[i];
      const Body& parent = walk_[n.depth - 1];
      if (still_[n.depth - 1] && n.plain_sub) {
        if (n.sub_end > n.tok_begin) {
          if (closable(parent))
            for (uint32_t t = n.tok_begin; t < n.sub_end; ++t) allow(ids[t]);
          else
            steered_ = true;
        }
        i = n.end;
        continue;
      }
      Body& b = walk_[n.depth];
      b = parent;
      const char ch = static_cast<char>(n.byte);
      b.advance(std::string_view(&ch, 1));
      if (b.failed()) {
        i = n.end;
        continue;
      }
      still_[n.depth] = still_[n.depth - 1] && is_plain_byte(n.byte);
      if (n.tok_end > n.tok_begin) {
        if (closable(b))
          for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) allow(ids[t]);
        else
          steered_ = true;
      }
      ++i;
    }
  }
  for (int32_t e : end_ids_)  // end of turn: only once the object is complete
    if (e >= 0 && e < trie.vocab()) {
      if (complete()) allow(e);
      else words[e >> 5] &= ~(1u << (e & 31));
    }
  int count = 0;
  for (int w = 0; w < mask_words(trie.vocab()); ++w) count += __builtin_popcount(words[w]);
  return count;
}

}  // namespace lily
