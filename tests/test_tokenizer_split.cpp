// The hand-written Qwen split matcher against ICU's regex engine running the same pattern, on hand-picked edge
// cases and on many random strings drawn from characters of every class the patterns care about.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"

#include "tokenizer/split_regex.h"
#include "tokenizer/utf8.h"
#include "tokenizer_test_util.h"

using namespace lily;

namespace {

std::vector<std::string> pieces(const RegexSplitter& s, const std::string& text) {
  std::vector<Span> spans;
  s.split(text, spans);
  std::vector<std::string> out;
  for (auto [b, e] : spans) out.push_back(text.substr(b, e - b));
  return out;
}

const uint32_t kPool[] = {
    'a', 'Z', 's', 'S', 't', 'T', 'r', 'R', 'e', 'E', 'v', 'V', 'm', 'M', 'l', 'L', 'd', 'D', 'x', '\'', '\'',
    '0', '7', ' ', ' ', ' ', '\t', '\n', '\r', 0x0B, 0x0C, 0x85, 0xA0, 0x1680, 0x2000, 0x2007, 0x200A, 0x2028,
    0x2029, 0x202F, 0x205F, 0x3000, 0x200B, 0x200D, 0xFEFF, 0x180E, '!', '?', '.', '(', '#', '_', '-', 0x01,
    0x7F, 0x17F /* long s */, 0x212A /* Kelvin */, 0xE9, 0xDF, 0x130, 0x4E2D, 0x0915, 0x093F /* Mc */,
    0x0301 /* Mn */, 0x0903, 0x20DD /* Me */, 0x0663 /* Nd */, 0x216B /* Nl */, 0xBD /* No */, 0x1F600,
    0x1F3FD, 0x1F1F9, 0xFE0F, 0x00B2, 0x3002, 0xFF01, 0x0E31, 0x05B0, 0x1D4D0 /* math letter */};

std::string random_text(std::mt19937& rng, size_t max_len) {
  std::uniform_int_distribution<size_t> len_d(1, max_len), pick(0, std::size(kPool) - 1);
  std::string s;
  size_t n = len_d(rng);
  for (size_t i = 0; i < n; ++i) utf8::append(s, kPool[pick(rng)]);
  return s;
}

void expect_same_split(const char* pattern, const std::vector<std::string>& texts) {
  auto hand = make_regex_splitter(pattern);
  auto icu = make_regex_splitter(pattern, SplitEngine::Icu);
  ASSERT_STRNE(hand->engine(), "icu");
  ASSERT_STREQ(icu->engine(), "icu");
  int bad = 0;
  for (const auto& t : texts) {
    auto a = pieces(*hand, t), b = pieces(*icu, t);
    if (a != b && ++bad <= 5) {
      std::string sa, sb;
      for (auto& p : a) sa += nlohmann::json(p).dump() + " ";
      for (auto& p : b) sb += nlohmann::json(p).dump() + " ";
      ADD_FAILURE() << "split differs for " << nlohmann::json(t).dump() << "\n hand: " << sa << "\n icu:  " << sb;
    }
  }
  EXPECT_EQ(bad, 0);
}

std::vector<std::string> edge_texts() {
  return {"'s 'S 'ſ 'T 're 'RE 'Ve 'll 'LL 'lL 'd 'x '", "don't I'M we've they'LL", "'sa'll'", " \n", "a  \n  b",
          " \n \n  x", "\r\n\r\n", "x   ", "x   y", "  leading", "trailing\t\t", "\u00a0\u00a0a",
          "!!!\n\n\nabc", " !!a", " !!\r\n", "e\u0301\u0301x", "\u0301abc", " \u0301", "\u0301\u0301 ",
          "क्षि", "12\u0663\u216b\u00bd", "\u00b2x", "a\u200bb", "\x0b\x0c\xc2\x85 x", "\u3000\u3000\u3000a", "?",
          "a", " ", "\n", "😀👍🏽🇹🇷", "x\u2028\u2029y", "ABC'S"};
}

std::vector<std::string> random_texts(uint32_t seed, size_t count) {
  std::mt19937 rng(seed);
  std::vector<std::string> v;
  for (size_t i = 0; i < count; ++i) v.push_back(random_text(rng, 24));
  return v;
}

}  // namespace

TEST(TokSplit, KnownPatternsPickHandWrittenEngine) {
  EXPECT_STREQ(make_regex_splitter(kQwen2SplitPattern)->engine(), "qwen2");
  EXPECT_STREQ(make_regex_splitter(kQwen35SplitPattern)->engine(), "qwen35");
  EXPECT_STREQ(make_regex_splitter(kGpt2SplitPattern)->engine(), "icu");
}

TEST(TokSplit, Qwen2HandMatchesIcuOnEdgeCases) { expect_same_split(kQwen2SplitPattern, edge_texts()); }
TEST(TokSplit, Qwen35HandMatchesIcuOnEdgeCases) { expect_same_split(kQwen35SplitPattern, edge_texts()); }
TEST(TokSplit, Qwen2HandMatchesIcuOnRandomText) { expect_same_split(kQwen2SplitPattern, random_texts(1, 20000)); }
TEST(TokSplit, Qwen35HandMatchesIcuOnRandomText) { expect_same_split(kQwen35SplitPattern, random_texts(2, 20000)); }

TEST(TokSplit, Qwen35KeepsCombiningMarksInWords) {
  auto q2 = make_regex_splitter(kQwen2SplitPattern), q35 = make_regex_splitter(kQwen35SplitPattern);
  std::string hindi = "नमस्ते";  // letters and combining marks
  EXPECT_EQ(pieces(*q35, hindi), std::vector<std::string>{hindi});
  EXPECT_GT(pieces(*q2, hindi).size(), 1u);
  EXPECT_EQ(pieces(*q35, "Hello, world!\n\n"), (std::vector<std::string>{"Hello", ",", " world", "!\n\n"}));
  EXPECT_EQ(pieces(*q35, "x = 123  \n"), (std::vector<std::string>{"x", " =", " ", "1", "2", "3", "  \n"}));
}

TEST(TokSplit, IcuTranslatesOnigurumaWhitespace) {
  // Oniguruma's \s includes U+000B and U+0085; ICU's own \s does not.
  EXPECT_EQ(icu_pattern_from_onig(R"(a\sb\Sc\\s)"),
            R"(a[\t\n\x0B\f\r\x{85}\p{Z}]b[^\t\n\x0B\f\r\x{85}\p{Z}]c\\s)");
  auto icu = make_regex_splitter(R"(\s+|\S+)", SplitEngine::Icu);
  EXPECT_EQ(pieces(*icu, "a\x0b\xc2\x85z"), (std::vector<std::string>{"a", "\x0b\xc2\x85", "z"}));
}

TEST(TokSplit, GapsBetweenMatchesArePieces) {
  auto icu = make_regex_splitter("[0-9]+", SplitEngine::Icu);
  EXPECT_EQ(pieces(*icu, "ab12cd345"), (std::vector<std::string>{"ab", "12", "cd", "345"}));
  EXPECT_EQ(pieces(*icu, ""), std::vector<std::string>{});
}

TEST(TokSplit, BadPatternIsAnError) {
  try {
    make_regex_splitter("(unclosed");
    FAIL() << "expected lily::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(unclosed"), std::string::npos) << e.what();
  }
}
