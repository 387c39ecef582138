// The pre-tokenizer's regex split (HF `Split` with behaviour Isolated, not inverted): text is cut into the regex
// matches and the (non-empty) gaps between them. Two engines:
//  - a hand-written matcher for the Qwen2/Qwen3 and the Qwen3.5 patterns (fast, no regex machinery);
//  - ICU's regex engine for any other pattern, with `\s`/`\S` rewritten to Oniguruma's meaning (White_Space:
//    ICU's own `\s` lacks U+000B and U+0085), which is what HF `tokenizers` uses.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lily {

// A piece of the text: byte offsets [first, second).
using Span = std::pair<uint32_t, uint32_t>;

class RegexSplitter {
 public:
  virtual ~RegexSplitter() = default;
  // Appends the pieces of `text` (well-formed UTF-8) to `out`, in order, covering all of it.
  virtual void split(std::string_view text, std::vector<Span>& out) const = 0;
  virtual const char* engine() const = 0;  // "qwen2", "qwen35" or "icu"
};

enum class SplitEngine { Auto, Icu };

// The Qwen2/Qwen3 and Qwen3.5 patterns exactly as tokenizer.json spells them.
extern const char* const kQwen2SplitPattern;
extern const char* const kQwen35SplitPattern;
// The GPT-2 pattern ByteLevel uses when its use_regex is true.
extern const char* const kGpt2SplitPattern;

// Auto: the hand-written matcher when `pattern` is one of the Qwen patterns, ICU otherwise.
// Throws lily::Error naming the pattern when ICU cannot compile it.
std::unique_ptr<RegexSplitter> make_regex_splitter(const std::string& pattern, SplitEngine engine = SplitEngine::Auto);

// Hand-written matcher for the Qwen patterns; marks_are_letters selects the Qwen3.5 variant.
std::unique_ptr<RegexSplitter> make_qwen_splitter(bool marks_are_letters);

// `pattern` rewritten for ICU (`\s` and `\S` as Oniguruma reads them).
std::string icu_pattern_from_onig(const std::string& pattern);

}  // namespace lily
