// Added-token matching options (lstrip, rstrip, single_word, normalized) and concurrent use.
#include <gtest/gtest.h>

#include <thread>

#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily::test;

namespace {

std::shared_ptr<Tokenizer> tiny_with(const nlohmann::json& extra_token) {
  auto j = nlohmann::json::parse(read_file(tiny_tokenizer_path()));
  j["added_tokens"].push_back(extra_token);
  return Tokenizer::from_json_text(j.dump(), "tiny+extra");
}

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(TokAdded, LongestMatchAtLeftmostPosition) {
  auto tok = tiny_with({{"id", 5000}, {"content", "<think>x"}, {"special", false}, {"normalized", false}});
  auto base = Tokenizer::load(tiny_tokenizer_path());
  EXPECT_EQ(tok->encode("a<think>xy"), cat(cat(base->encode("a"), {5000}), base->encode("y")));
  EXPECT_EQ(tok->encode("<think>y"), cat({4120}, base->encode("y")));
  EXPECT_EQ(tok->vocab_size(), 5001u);
}

TEST(TokAdded, LstripAndRstripSwallowWhitespace) {
  auto base = Tokenizer::load(tiny_tokenizer_path());
  auto l = tiny_with({{"id", 5000}, {"content", "<mask>"}, {"lstrip", true}, {"special", true}, {"normalized", false}});
  EXPECT_EQ(l->encode("a  <mask> b"), cat(cat(base->encode("a"), {5000}), base->encode(" b")));
  auto r = tiny_with({{"id", 5000}, {"content", "<mask>"}, {"rstrip", true}, {"special", true}, {"normalized", false}});
  EXPECT_EQ(r->encode("a <mask>  b"), cat(cat(base->encode("a "), {5000}), base->encode("b")));
  EXPECT_EQ(r->decode({5000}), "<mask>");
}

TEST(TokAdded, SingleWordNeedsWordBoundaries) {
  auto base = Tokenizer::load(tiny_tokenizer_path());
  auto t = tiny_with({{"id", 5000}, {"content", "cat"}, {"single_word", true}, {"special", false}, {"normalized", false}});
  EXPECT_EQ(t->encode("a cat b"), cat(cat(base->encode("a "), {5000}), base->encode(" b")));
  EXPECT_EQ(t->encode("concat"), base->encode("concat"));
}

TEST(TokAdded, NormalizedTokensMatchAfterNfc) {
  auto base = Tokenizer::load(tiny_tokenizer_path());
  // "é" composed in the token; the text spells it decomposed, which NFC composes before matching.
  auto t = tiny_with({{"id", 5000}, {"content", "caf\u00e9"}, {"special", false}, {"normalized", true}});
  EXPECT_EQ(t->encode("a cafe\u0301!"), cat(cat(base->encode("a "), {5000}), base->encode("!")));
}

TEST(TokAdded, ConcurrentEncodeIsConsistent) {
  auto tok = Tokenizer::load(tiny_tokenizer_path());
  auto cases = read_cases(LILY_TEST_DIR "/fixtures/tiny/tokenizer_cases.jsonl");
  std::vector<std::thread> threads;
  std::vector<int> bad(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = t; i < cases.size() * 2; i += 3) {
        const auto& c = cases[i % cases.size()];
        if (tok->encode(c.text) != c.ids) ++bad[t];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int b : bad) EXPECT_EQ(b, 0);
}
