#include "tokenizer/split_regex.h"

#include <unicode/regex.h>
#include <unicode/utext.h>

#include "core/error.h"

namespace lily {

const char* const kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen35SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string icu_pattern_from_onig(const std::string& pattern) {
  // Oniguruma's \s for Unicode text: U+0009..U+000D, U+0085 and the Z categories (= Unicode White_Space).
  static const std::string kSpace = R"([\t\n\x0B\f\r\x{85}\p{Z}])";
  static const std::string kNonSpace = R"([^\t\n\x0B\f\r\x{85}\p{Z}])";
  std::string out;
  out.reserve(pattern.size() + 64);
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c != '\\' || i + 1 == pattern.size()) {
      out += c;
      continue;
    }
    char e = pattern[++i];
    if (e == 's') {
      out += kSpace;  // a nested set is valid inside a class as well (set union)
    } else if (e == 'S') {
      out += kNonSpace;
    } else {
      out += '\\';
      out += e;
    }
  }
  return out;
}

namespace {

class IcuSplitter final : public RegexSplitter {
 public:
  explicit IcuSplitter(const std::string& pattern) {
    UErrorCode st = U_ZERO_ERROR;
    UParseError pe{};
    std::string translated = icu_pattern_from_onig(pattern);
    pattern_.reset(icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(translated), 0, pe, st));
    if (U_FAILURE(st) || !pattern_) {
      throw Error("pre-tokenizer regex cannot be compiled (" + std::string(u_errorName(st)) + " at offset " +
                  std::to_string(pe.offset) + "): " + pattern);
    }
  }

  void split(std::string_view text, std::vector<Span>& out) const override {
    if (text.empty()) return;
    UErrorCode st = U_ZERO_ERROR;
    UText* ut = utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &st);
    std::unique_ptr<icu::RegexMatcher> m(U_SUCCESS(st) ? pattern_->matcher(st) : nullptr);
    if (U_FAILURE(st) || !m) {
      utext_close(ut);
      throw Error("ICU regex matcher failed: " + std::string(u_errorName(st)));
    }
    m->reset(ut);
    uint32_t prev = 0;
    while (m->find(st) && U_SUCCESS(st)) {
      // The UText is over UTF-8, so native indexes are byte offsets.
      auto b = static_cast<uint32_t>(m->start64(st));
      auto e = static_cast<uint32_t>(m->end64(st));
      if (e == b) continue;  // empty matches make no piece
      if (b > prev) out.emplace_back(prev, b);
      out.emplace_back(b, e);
      prev = e;
    }
    m.reset();
    utext_close(ut);
    if (U_FAILURE(st)) throw Error("ICU regex search failed: " + std::string(u_errorName(st)));
    if (prev < text.size()) out.emplace_back(prev, static_cast<uint32_t>(text.size()));
  }

  const char* engine() const override { return "icu"; }

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

}  // namespace

std::unique_ptr<RegexSplitter> make_regex_splitter(const std::string& pattern, SplitEngine engine) {
  if (engine == SplitEngine::Auto) {
    if (pattern == kQwen2SplitPattern) return make_qwen_splitter(false);
    if (pattern == kQwen35SplitPattern) return make_qwen_splitter(true);
  }
  return std::make_unique<IcuSplitter>(pattern);
}

}  // namespace lily
