// Tokenizer against HF `tokenizers` reference output: the tiny Qwen3.5-style tokenizer, the real Qwen3 151k
// tokenizer with its own (Qwen2) regex and with the Qwen3.5 regex, each with both split engines.
#include <gtest/gtest.h>

#include "tokenizer/split_regex.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

std::string show_ids(const std::vector<int32_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(v[i]);
  }
  return s;
}

// Runs every case; returns the number of failures (each reported once, with its text).
int run_cases(const Tokenizer& tok, const std::vector<TokCase>& cases) {
  int failures = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& c = cases[i];
    auto ids = tok.encode(c.text);
    if (ids != c.ids) {
      ++failures;
      ADD_FAILURE() << "case " << i << " ids differ\n text: " << nlohmann::json(c.text).dump()
                    << "\n want: " << show_ids(c.ids) << "\n got:  " << show_ids(ids);
      continue;
    }
    std::string dec = tok.decode(c.ids);
    if (dec != c.decoded) {
      ++failures;
      ADD_FAILURE() << "case " << i << " decode differs\n want: " << nlohmann::json(c.decoded).dump()
                    << "\n got:  " << nlohmann::json(dec).dump();
    }
  }
  return failures;
}

}  // namespace

TEST(TokFixtures, TinyAllCases) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  EXPECT_STREQ(tok->split_engine(), "qwen35");
  EXPECT_EQ(tok->split_regex(), kQwen35SplitPattern);
  auto cases = read_cases(LILY_TEST_DIR "/fixtures/tiny/tokenizer_cases.jsonl");
  ASSERT_GT(cases.size(), 300u);
  EXPECT_EQ(run_cases(*tok, cases), 0);
}

TEST(TokFixtures, TinyAllCasesIcuEngine) {
  auto tok = tokenizer_with_engine(read_file(tiny_tokenizer_path()), SplitEngine::Icu);
  EXPECT_STREQ(tok->split_engine(), "icu");
  EXPECT_EQ(run_cases(*tok, read_cases(LILY_TEST_DIR "/fixtures/tiny/tokenizer_cases.jsonl")), 0);
}

TEST(TokFixtures, TinyVocabFacts) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  EXPECT_EQ(tok->vocab_size(), 4122u);
  EXPECT_EQ(tok->token_to_id("<|im_start|>"), 4097);
  EXPECT_TRUE(tok->is_special(4097));
  EXPECT_FALSE(tok->is_special(4120));  // <think> is special=false
  EXPECT_FALSE(tok->is_special(0));
  EXPECT_EQ(tok->token_bytes(4120), "<think>");
  EXPECT_EQ(tok->token_bytes(220), " ");
  EXPECT_EQ(tok->token_bytes(-1), "");
  EXPECT_EQ(tok->token_bytes(1 << 20), "");
  EXPECT_EQ(tok->token_to_id("Ġ"), 220);
  EXPECT_EQ(tok->token_to_id("no such token"), -1);
  EXPECT_EQ(tok->encode(""), std::vector<int32_t>{});
  // Added tokens are matched as whole strings, special or not, including back to back.
  EXPECT_EQ(tok->encode("<think><|im_end|>"), (std::vector<int32_t>{4120, 4098}));
}

class TokQwen3 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!file_exists(qwen3_tokenizer_path()))
      GTEST_SKIP() << "no " << qwen3_tokenizer_path() << " (run scripts/fetch-test-data.sh)";
  }
};

TEST_F(TokQwen3, AllCases) {
  auto tok = Tokenizer::load(qwen3_tokenizer_path());
  EXPECT_STREQ(tok->split_engine(), "qwen2");
  EXPECT_EQ(tok->vocab_size(), 151669u);
  EXPECT_EQ(tok->encode("Hello world"), (std::vector<int32_t>{9707, 1879}));
  auto cases = read_cases(LILY_TEST_DIR "/fixtures/qwen3-tokenizer/cases.jsonl");
  ASSERT_GT(cases.size(), 300u);
  EXPECT_EQ(run_cases(*tok, cases), 0);
}

TEST_F(TokQwen3, AllCasesIcuEngine) {
  auto tok = tokenizer_with_engine(read_file(qwen3_tokenizer_path()), SplitEngine::Icu);
  EXPECT_EQ(run_cases(*tok, read_cases(LILY_TEST_DIR "/fixtures/qwen3-tokenizer/cases.jsonl")), 0);
}

TEST_F(TokQwen3, Qwen35RegexAllCases) {
  std::string json = with_split_regex(read_file(qwen3_tokenizer_path()), kQwen35SplitPattern);
  auto tok = Tokenizer::from_json_text(json, "qwen3 tokenizer.json with the Qwen3.5 regex");
  EXPECT_STREQ(tok->split_engine(), "qwen35");
  auto cases = read_cases(LILY_TEST_DIR "/fixtures/qwen3-tokenizer/cases-qwen35-regex.jsonl");
  ASSERT_GT(cases.size(), 300u);
  EXPECT_EQ(run_cases(*tok, cases), 0);
}

TEST_F(TokQwen3, Qwen35RegexAllCasesIcuEngine) {
  std::string json = with_split_regex(read_file(qwen3_tokenizer_path()), kQwen35SplitPattern);
  auto tok = tokenizer_with_engine(json, SplitEngine::Icu);
  EXPECT_EQ(run_cases(*tok, read_cases(LILY_TEST_DIR "/fixtures/qwen3-tokenizer/cases-qwen35-regex.jsonl")), 0);
}
