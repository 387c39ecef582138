#include <gtest/gtest.h>

#include "app/make_backend.h"
#include "bench/bench_math.h"
#include "bench/bench_runner.h"
#include "core/error.h"
#include "model/weights.h"

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

// --decode-context unfilled: the decode context is zeros, not a prefill (timing only); the run still repeats
// exactly (digest per rep), prefill lengths are still prefilled, and a context beyond the state is refused.
TEST(Bench, UnfilledDecodeContextOnTheTinyModel) {
  auto w = load_model(std::string(LILY_TEST_DIR) + "/fixtures/tiny/model-mlx-4bit");
  auto be = make_backend("cpu", w);
  BenchOptions opt;
  opt.prefill_lengths = {8};
  opt.decode_contexts = {8, 200};
  opt.reps = 2;
  opt.decode_steps = 6;
  opt.unfilled_context = true;
  auto res = run_bench(*be, opt);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[0].prefill_measured);  // 8: a prefill length, so prefilled as usual
  EXPECT_EQ(res[0].prefill_s.size(), 2u);
  EXPECT_FALSE(res[1].prefill_measured);
  ASSERT_EQ(res[1].decode_s.size(), 2u);
  EXPECT_TRUE(res[1].digest_consistent);
  auto st = be->new_state(50);
  EXPECT_THROW(be->fill_context_for_timing(*st, 51), Error);
  be->fill_context_for_timing(*st, 50);
  EXPECT_EQ(st->pos, 50);
}

// --sampled: every decode context is also timed through decode_sample (the backend's sampler at T = 1 and at
// T = 0.7 / top-k 20 / top-p 0.9, then the host sampler), on a context of zeros; prefill lengths are not.
TEST(Bench, SampledDecodeOnTheTinyModel) {
  auto w = load_model(std::string(LILY_TEST_DIR) + "/fixtures/tiny/model-mlx-4bit");
  auto be = make_backend("cpu", w);
  BenchOptions opt;
  opt.prefill_lengths = {8};
  opt.decode_contexts = {16};
  opt.reps = 1;
  opt.decode_steps = 5;
  opt.sampled = true;
  auto res = run_bench(*be, opt);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_EQ(res[0].sampled_t1, 0.0);  // 8: a prefill length only
  EXPECT_GT(res[1].sampled_t1, 0.0);
  EXPECT_GT(res[1].sampled_k20, 0.0);
  EXPECT_GT(res[1].sampled_host_k20, 0.0);
}
