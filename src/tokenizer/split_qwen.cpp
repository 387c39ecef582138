// Hand-written matcher equivalent to the Qwen2/Qwen3 and Qwen3.5 pre-tokenizer patterns (see split_regex.h):
//   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?LETTER+ | \p{N} | ' '?PUNCT+[\r\n]* | \s*[\r\n]+ |
//   \s+(?!\S) | \s+
// with LETTER = \p{L} (Qwen2) or [\p{L}\p{M}] (Qwen3.5) and PUNCT = [^\s\p{L}\p{N}] (Qwen2) or [^\s\p{L}\p{M}\p{N}]
// (Qwen3.5). The alternatives are tried in order at each position, as a backtracking engine does; the comments
// below spell out what backtracking does for each of them. `\s` is Unicode White_Space, as in Oniguruma.
#include <unicode/uchar.h>

#include <array>
#include <cstdint>

#include "tokenizer/split_regex.h"
#include "tokenizer/utf8.h"

namespace lily {

namespace {

enum : uint8_t { kL = 1, kM = 2, kN = 4, kS = 8, kCrLf = 16 };

uint8_t classify_slow(uint32_t cp) {
  uint8_t f = 0;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER: f |= kL; break;
    case U_NON_SPACING_MARK:
    case U_ENCLOSING_MARK:
    case U_COMBINING_SPACING_MARK: f |= kM; break;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER: f |= kN; break;
    default: break;
  }
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) f |= kS;
  if (cp == '\r' || cp == '\n') f |= kCrLf;
  return f;
}

struct AsciiTable {
  std::array<uint8_t, 128> f{};
  AsciiTable() {
    for (uint32_t c = 0; c < 128; ++c) f[c] = classify_slow(c);
  }
};

inline uint8_t classify(uint32_t cp) {
  static const AsciiTable t;
  return cp < 128 ? t.f[cp] : classify_slow(cp);
}

// Simple case folding restricted to what the contraction alternatives need (ſ U+017F folds to s).
inline uint32_t fold(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp == 0x17F) return 's';
  return cp;
}

// The decoded text: code points and their classes.
struct Text {
  const uint32_t* cps;
  const uint8_t* cls;
  size_t n;
  uint8_t letter;     // classes of LETTER
  uint8_t not_punct;  // classes excluded from PUNCT

  bool is_letter(size_t k) const { return k < n && (cls[k] & letter); }
  bool is_punct(size_t k) const { return k < n && !(cls[k] & not_punct); }
  bool is_space(size_t k) const { return k < n && (cls[k] & kS); }
  bool is_crlf(size_t k) const { return k < n && (cls[k] & kCrLf); }
  template <class Pred>
  size_t run(size_t k, Pred pred) const {
    while ((this->*pred)(k)) ++k;
    return k;
  }

  // End (code point index) of the match at p, or p when no alternative matches.
  size_t match_at(size_t p) const {
    const uint32_t c0 = cps[p];
    const uint8_t f0 = cls[p];
    // (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if (c0 == '\'' && p + 1 < n) {
      uint32_t c1 = fold(cps[p + 1]);
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return p + 2;
      if (p + 2 < n) {
        uint32_t c2 = fold(cps[p + 2]);
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return p + 3;
      }
    }
    // [^\r\n\p{L}\p{N}]?LETTER+ : the optional char is kept only when a letter follows it; otherwise
    // backtracking drops it and the run must start at p.
    if (!(f0 & (kCrLf | kL | kN)) && is_letter(p + 1)) return run(p + 1, &Text::is_letter);
    if (is_letter(p)) return run(p, &Text::is_letter);
    // \p{N}
    if (f0 & kN) return p + 1;
    // ' '?PUNCT+[\r\n]* : a space not followed by PUNCT cannot start this alternative (a space is \s).
    if (c0 == ' ' && is_punct(p + 1)) return run(run(p + 1, &Text::is_punct), &Text::is_crlf);
    if (is_punct(p)) return run(run(p, &Text::is_punct), &Text::is_crlf);
    if (!(f0 & kS)) return p;
    // Whitespace run [p, j).
    size_t j = run(p, &Text::is_space);
    // \s*[\r\n]+ : \s* gives back until a CR/LF can follow; the match ends after the run's last CR/LF (what
    // follows it is whitespace other than CR/LF, or no whitespace at all).
    for (size_t k = j; k > p; --k) {
      if (cls[k - 1] & kCrLf) return k;
    }
    // \s+(?!\S) : the whole run at the end of the text; else the run less its last char (which is then followed
    // by whitespace), if that leaves at least one.
    if (j == n) return j;
    if (j - p >= 2) return j - 1;
    // \s+
    return j;
  }
};

class QwenSplitter final : public RegexSplitter {
 public:
  explicit QwenSplitter(bool marks_are_letters) : q35_(marks_are_letters) {}

  void split(std::string_view text, std::vector<Span>& out) const override {
    // Decode once: code points, their classes and byte offsets (off[n] = text.size()).
    thread_local std::vector<uint32_t> cps;
    thread_local std::vector<uint8_t> cls;
    thread_local std::vector<uint32_t> off;
    cps.clear();
    cls.clear();
    off.clear();
    size_t i = 0;
    while (i < text.size()) {
      uint32_t cp;
      size_t len;
      if (utf8::next(text.substr(i), &cp, &len) != utf8::Step::Ok) {
        cp = 0xFFFD;  // callers pass well-formed text; stay in bounds regardless
        len = 1;
      }
      cps.push_back(cp);
      cls.push_back(classify(cp));
      off.push_back(static_cast<uint32_t>(i));
      i += len;
    }
    off.push_back(static_cast<uint32_t>(text.size()));
    Text t{cps.data(), cls.data(), cps.size(), static_cast<uint8_t>(q35_ ? (kL | kM) : kL),
           static_cast<uint8_t>(q35_ ? (kS | kL | kM | kN) : (kS | kL | kN))};

    size_t gap = SIZE_MAX;  // start of text no alternative matched (cannot happen with these classes)
    size_t p = 0;
    while (p < t.n) {
      size_t e = t.match_at(p);
      if (e == p) {
        if (gap == SIZE_MAX) gap = p;
        ++p;
        continue;
      }
      if (gap != SIZE_MAX) {
        out.emplace_back(off[gap], off[p]);
        gap = SIZE_MAX;
      }
      out.emplace_back(off[p], off[e]);
      p = e;
    }
    if (gap != SIZE_MAX) out.emplace_back(off[gap], off[t.n]);
  }

  const char* engine() const override { return q35_ ? "qwen35" : "qwen2"; }

 private:
  bool q35_;
};

}  // namespace

std::unique_ptr<RegexSplitter> make_qwen_splitter(bool marks_are_letters) {
  return std::make_unique<QwenSplitter>(marks_are_letters);
}

}  // namespace lily
