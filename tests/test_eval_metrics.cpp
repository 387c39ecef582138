#include <gtest/gtest.h>

#include <cmath>

#include "eval/logit_metrics.h"

using namespace lily;

TEST(EvalMetrics, LogSoftmaxAndKl) {
  float x[3] = {0.0f, 0.0f, 0.0f};
  double out[3];
  log_softmax(x, 3, out);
  for (double v : out) EXPECT_NEAR(v, -std::log(3.0), 1e-12);
  // p = softmax(0, log 3) = (1/4, 3/4), q = uniform: KL = 1/4 log(1/2) + 3/4 log(3/2).
  float p[2] = {0.0f, float(std::log(3.0))}, q[2] = {1.0f, 1.0f};
  EXPECT_NEAR(kl_divergence(p, q, 2), 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-6);
  EXPECT_NEAR(kl_divergence(p, p, 2), 0.0, 1e-12);
  // Shift invariance: adding a constant to every logit changes nothing.
  float p2[2] = {5.0f, 5.0f + float(std::log(3.0))};
  EXPECT_NEAR(kl_divergence(p2, q, 2), kl_divergence(p, q, 2), 1e-6);
  EXPECT_NEAR(neg_log_prob(p, 2, 1), -std::log(0.75), 1e-6);
}

TEST(EvalMetrics, CompareLogits) {
  // Two positions, vocab 4. Position 0 agrees exactly; position 1 differs in argmax.
  const float ref[8] = {0, 0, 0, 0, 1, 2, 3, 4};
  const float ours[8] = {0, 0, 0, 0, 4, 2, 3, 1};
  auto c = compare_logits(ref, ours, 2, 4, {2});  // one scored position: next token of position 0 is 2
  EXPECT_EQ(c.positions, 2);
  EXPECT_DOUBLE_EQ(c.top1_agreement, 0.5);
  EXPECT_DOUBLE_EQ(c.max_abs_err, 3.0);
  EXPECT_NEAR(c.rms_err, std::sqrt(18.0 / 8), 1e-12);
  EXPECT_EQ(c.scored, 1);
  EXPECT_NEAR(c.ppl_ref, 4.0, 1e-9);  // uniform over 4 -> perplexity 4
  EXPECT_NEAR(c.ppl_ours, 4.0, 1e-9);
  EXPECT_NEAR(c.max_kl, c.mean_kl * 2, 1e-12);  // position 0 contributes 0
  EXPECT_GT(c.max_kl, 0.0);
  EXPECT_NEAR(perplexity(2 * std::log(2.0), 2), 2.0, 1e-12);
}
