#include "tokenizer/added_tokens.h"

#include <unicode/uchar.h>

#include <algorithm>

#include "tokenizer/utf8.h"

namespace lily {

namespace {

// The code point ending at byte `end` of s (s[..end] well-formed), with its start in *start.
uint32_t cp_before(std::string_view s, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  uint32_t cp = 0xFFFD;
  size_t len;
  if (utf8::next(s.substr(b, end - b), &cp, &len) != utf8::Step::Ok) cp = 0xFFFD;
  *start = b;
  return cp;
}

uint32_t cp_at(std::string_view s, size_t pos, size_t* len) {
  uint32_t cp = 0xFFFD;
  if (utf8::next(s.substr(pos), &cp, len) != utf8::Step::Ok) {
    cp = 0xFFFD;
    *len = 1;
  }
  return cp;
}

bool is_space(uint32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }
bool is_word(uint32_t cp) { return cp == '_' || u_isalnum(static_cast<UChar32>(cp)); }

}  // namespace

void AddedTokenMatcher::add(const AddedToken& t, std::string pattern) {
  if (pattern.empty()) return;  // an empty token can never be matched
  uint32_t idx = static_cast<uint32_t>(entries_.size());
  auto& bucket = by_first_byte_[static_cast<unsigned char>(pattern[0])];
  entries_.push_back({std::move(pattern), t.id, t.lstrip, t.rstrip, t.single_word});
  bucket.push_back(idx);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [&](uint32_t a, uint32_t b) { return entries_[a].pattern.size() > entries_[b].pattern.size(); });
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  size_t done = 0;  // end of the last emitted segment
  size_t pos = 0;   // where the search for the next match starts
  while (pos < text.size()) {
    const Entry* hit = nullptr;
    size_t at = pos;
    for (; at < text.size() && !hit; ++at) {
      const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[at])];
      for (uint32_t idx : bucket) {
        const Entry& e = entries_[idx];
        if (text.compare(at, e.pattern.size(), e.pattern) == 0) {
          hit = &e;
          break;
        }
      }
    }
    if (!hit) break;
    size_t start = at - 1, stop = start + hit->pattern.size();
    pos = stop;  // matches do not overlap, rejected ones included
    if (hit->single_word) {
      size_t b;
      bool word_before = start > 0 && is_word(cp_before(text, start, &b));
      size_t len;
      bool word_after = stop < text.size() && is_word(cp_at(text, stop, &len));
      if (word_before || word_after) continue;
    }
    if (hit->lstrip) {
      size_t s = start;
      while (s > done) {
        size_t b;
        if (!is_space(cp_before(text, s, &b))) break;
        s = b;
      }
      start = s;
    }
    if (hit->rstrip) {
      size_t len;
      while (stop < text.size() && is_space(cp_at(text, stop, &len))) stop += len;
      pos = stop;
    }
    if (start > done) out.push_back({done, start, -1});
    out.push_back({start, stop, hit->id});
    done = stop;
  }
  if (done < text.size()) out.push_back({done, text.size(), -1});
}

}  // namespace lily
