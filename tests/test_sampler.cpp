// Sampler: greedy, seeded determinism, top-k / top-p / min-p restriction, penalties, logprobs.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "engine/sampler.h"

using namespace lily;

namespace {

std::vector<float> logits_of(std::vector<float> p) {  // probabilities -> logits
  for (auto& x : p) x = std::log(x);
  return p;
}

std::vector<int32_t> draw(SamplerParams p, const std::vector<float>& l, int n) {
  Sampler s(p, {});
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(l.data(), static_cast<int>(l.size())).id);
  return out;
}

}  // namespace

TEST(Sampler, GreedyAtTemperatureZero) {
  SamplerParams p;
  p.temperature = 0;
  std::vector<float> l = {0.1f, 2.0f, -1.0f, 1.9f};
  for (int32_t id : draw(p, l, 20)) EXPECT_EQ(id, 1);
}

TEST(Sampler, SameSeedSameTokens) {
  SamplerParams p;
  p.has_seed = true;
  p.seed = 1234;
  std::vector<float> l(1000);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 0.37) * 3);
  auto a = draw(p, l, 200), b = draw(p, l, 200);
  EXPECT_EQ(a, b);
  p.seed = 99;
  EXPECT_NE(a, draw(p, l, 200));
  EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 10u);  // it does sample
}

TEST(Sampler, TopKRestricts) {
  SamplerParams p;
  p.top_k = 2;
  p.has_seed = true;
  auto l = logits_of({0.1f, 0.4f, 0.3f, 0.2f});
  for (int32_t id : draw(p, l, 300)) EXPECT_TRUE(id == 1 || id == 2);
}

TEST(Sampler, TopPRestricts) {
  SamplerParams p;
  p.top_p = 0.65f;  // 0.4 + 0.3 reaches it: tokens 1, 2
  p.has_seed = true;
  auto l = logits_of({0.1f, 0.4f, 0.3f, 0.2f});
  std::set<int32_t> seen;
  for (int32_t id : draw(p, l, 500)) seen.insert(id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2}));
}

TEST(Sampler, TopPOnLargeVocabulary) {
  SamplerParams p;
  p.top_p = 0.9f;
  p.has_seed = true;
  std::vector<float> pr(5000, 0.5f / 4990);  // ten likely tokens hold half the mass
  for (int i = 0; i < 10; ++i) pr[i * 400] = 0.05f;
  auto l = logits_of(pr);
  int likely = 0;
  for (int32_t id : draw(p, l, 400)) likely += id % 400 == 0 && id < 4000;
  EXPECT_GT(likely, 150);
  EXPECT_LT(likely, 400);
}

TEST(Sampler, MinPRestricts) {
  SamplerParams p;
  p.min_p = 0.45f;  // keep p >= 0.18
  p.has_seed = true;
  auto l = logits_of({0.1f, 0.4f, 0.3f, 0.2f});
  std::set<int32_t> seen;
  for (int32_t id : draw(p, l, 500)) seen.insert(id);
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2, 3}));
}

TEST(Sampler, DistributionFollowsProbabilities) {
  SamplerParams p;
  p.has_seed = true;
  p.seed = 7;
  auto l = logits_of({0.7f, 0.2f, 0.1f});
  std::map<int32_t, int> c;
  for (int32_t id : draw(p, l, 5000)) c[id]++;
  EXPECT_NEAR(c[0] / 5000.0, 0.7, 0.03);
  EXPECT_NEAR(c[1] / 5000.0, 0.2, 0.03);
}

TEST(Sampler, PresenceAndFrequencyPenalties) {
  SamplerParams p;
  p.temperature = 0;
  p.frequency_penalty = 1.0f;
  Sampler s(p, {});
  std::vector<float> l = {2.5f, 1.0f, 0.0f};
  EXPECT_EQ(s.sample(l.data(), 3).id, 0);
  s.accept(0);  // 2.5 - 1 = 1.5 still wins
  EXPECT_EQ(s.sample(l.data(), 3).id, 0);
  s.accept(0);  // 2.5 - 2 = 0.5 < 1.0
  EXPECT_EQ(s.sample(l.data(), 3).id, 1);

  SamplerParams q;
  q.temperature = 0;
  q.presence_penalty = 2.0f;
  Sampler t(q, {});
  t.accept(0);
  EXPECT_EQ(t.sample(l.data(), 3).id, 1);
}

TEST(Sampler, RepetitionPenaltyCoversPrompt) {
  SamplerParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  std::vector<float> l = {2.0f, 1.5f, -1.0f};
  Sampler s(p, {0});  // 2.0 / 2 = 1.0 < 1.5
  EXPECT_EQ(s.sample(l.data(), 3).id, 1);
}

TEST(Sampler, Logprobs) {
  SamplerParams p;
  p.temperature = 0;
  p.top_logprobs = 2;
  Sampler s(p, {});
  auto l = logits_of({0.5f, 0.25f, 0.25f});
  SampleResult r = s.sample(l.data(), 3);
  EXPECT_EQ(r.id, 0);
  EXPECT_NEAR(r.logprob, std::log(0.5), 1e-5);
  ASSERT_EQ(r.top.size(), 2u);
  EXPECT_EQ(r.top[0].id, 0);
  EXPECT_EQ(r.top[1].id, 1);  // ties broken by id
  EXPECT_NEAR(r.top[1].logprob, std::log(0.25), 1e-5);
}

TEST(Sampler, NonFiniteLogitsDoNotCrash) {
  SamplerParams p;
  p.has_seed = true;
  float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l = {-inf, std::nanf(""), -inf, 1.0f};
  EXPECT_EQ(draw(p, l, 5), (std::vector<int32_t>(5, 3)));
}
