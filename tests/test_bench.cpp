#include <gtest/gtest.h>

#include "bench/bench_math.h"
#include "core/error.h"

using namespace lily;

TEST(Bench, PromptIdFormula) {
  EXPECT_EQ(bench_prompt_id(0, 248320), 0);
  EXPECT_EQ(bench_prompt_id(1, 248320), int32_t(2654435761ull % 248320));
  // i = 2: 5308871522 mod 2^32 = 1013904226
  EXPECT_EQ(bench_prompt_id(2, 248320), int32_t(1013904226ull % 248320));
  auto p = bench_prompt(1000, 4160);
  for (auto id : p) EXPECT_TRUE(id >= 0 && id < 4160);
  EXPECT_EQ(p[7], bench_prompt_id(7, 4160));
}

TEST(Bench, DigestStable) {
  // FNV-1a 64 of no bytes is the offset basis; of the single id 0 it is the basis hashed with four zero bytes.
  EXPECT_EQ(fnv1a_ids({}), 0xcbf29ce484222325ull);
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < 4; ++i) h = h * 0x100000001b3ull;
  EXPECT_EQ(fnv1a_ids({0}), h);
  std::vector<int32_t> a(64), b(64);
  for (int i = 0; i < 64; ++i) a[size_t(i)] = b[size_t(i)] = i * 37;
  EXPECT_EQ(fnv1a_ids(a), fnv1a_ids(b));
  b[63] += 1;
  EXPECT_NE(fnv1a_ids(a), fnv1a_ids(b));
  EXPECT_EQ(hex64(0xabcull), "0000000000000abc");
}

TEST(Bench, StatsAndLists) {
  auto s = sample_stats({3, 1, 2});
  EXPECT_EQ(s.median, 2);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 3);
  EXPECT_EQ(sample_stats({4, 1, 2, 3}).median, 2.5);
  EXPECT_EQ(parse_length_list("256,1K,4k"), (std::vector<int>{256, 1024, 4096}));
  EXPECT_THROW(parse_length_list("12x"), Error);
  EXPECT_EQ(length_label(131072), "128K");
  EXPECT_EQ(length_label(300), "300");
  float x[4] = {1, 5, 5, 2};
  EXPECT_EQ(argmax(x, 4), 1);
}
