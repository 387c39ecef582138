// The step sampler's host reference (engine/step_sampler.h): Philox known answer, the filters, penalties, seeds,
// chi-square distribution tests, and Backend::decode_sample's default (one step of lookahead) on a fake backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "engine/backend.h"
#include "engine/step_sampler.h"

using namespace lily;

namespace {

std::vector<float> random_logits(int V, uint32_t seed, float scale = 3.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, scale);
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = n(g);
  return l;
}

// Independent expected distribution: softmax at T of the logits, then top-k (by value), min-p, top-p (descending,
// smallest prefix reaching top_p of the mass), renormalised. Assumes distinct logits.
std::vector<double> expected(const std::vector<float>& l, float T, int top_k, float min_p, float top_p) {
  const int V = int(l.size());
  std::vector<int> idx(static_cast<size_t>(V));
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
  const double mx = l[size_t(idx[0])];
  int n = top_k > 0 ? std::min(top_k, V) : V;
  std::vector<double> w;
  for (int i = 0; i < n; ++i) w.push_back(std::exp((l[size_t(idx[size_t(i)])] - mx) / T));
  if (min_p > 0)
    while (n > 1 && w[size_t(n - 1)] < min_p) --n;
  double z = 0;
  for (int i = 0; i < n; ++i) z += w[size_t(i)];
  if (top_p < 1) {
    double c = 0;
    int m = 0;
    while (m < n && c < top_p * z) c += w[size_t(m++)];
    n = m;
    z = c;
  }
  std::vector<double> p(static_cast<size_t>(V), 0.0);
  for (int i = 0; i < n; ++i) p[size_t(idx[size_t(i)])] = w[size_t(i)] / z;
  return p;
}

// Pearson chi-square of `draws` samples against p (cells with p > 0; a draw outside the support fails).
void check_distribution(const std::vector<float>& l, const samp::StepParams& sp, const std::vector<double>& p,
                        int draws) {
  const int V = int(l.size());
  std::vector<uint32_t> table(static_cast<size_t>(V), 0);
  std::vector<int> cnt(static_cast<size_t>(V), 0);
  for (int s = 0; s < draws; ++s) {
    const int32_t id = StepSampler::pick(l.data(), table.data(), V, sp, samp::philox64(sp.seed, uint64_t(s)));
    ASSERT_GE(id, 0);
    ASSERT_LT(id, V);
    ASSERT_GT(p[size_t(id)], 0.0) << "drew token " << id << " outside the filtered set";
    ++cnt[size_t(id)];
  }
  double chi2 = 0;
  int df = -1;
  for (int i = 0; i < V; ++i)
    if (p[size_t(i)] > 0) {
      const double e = p[size_t(i)] * draws;
      chi2 += (cnt[size_t(i)] - e) * (cnt[size_t(i)] - e) / e;
      ++df;
    }
  // mean df, sd sqrt(2 df): 6 sd is a false alarm rate below 1e-6; a biased draw (e.g. an off-by-one in the
  // inverse CDF or a wrong filter) gives chi2 in the thousands at these sample sizes.
  const double bound = df + 6.0 * std::sqrt(2.0 * std::max(df, 1));
  std::printf("[ step sampler ] chi2 %.1f over %d dof (bound %.1f)\n", chi2, df, bound);
  EXPECT_LT(chi2, bound);
}

}  // namespace

TEST(StepSampler, PhiloxKnownAnswer) {
  // Random123 kat_vectors: philox4x32-10, counter 0, key 0 -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8.
  EXPECT_EQ(samp::philox64(0, 0), 0xe169c58d6627e8d5ull);
  EXPECT_NE(samp::philox64(1, 0), samp::philox64(0, 0));
  EXPECT_NE(samp::philox64(0, 1), samp::philox64(0, 0));
}

TEST(StepSampler, KeysAreMonotone) {
  const float v[] = {-INFINITY, -1e30f, -2.5f, -1e-30f, -0.0f, 0.0f, 1e-30f, 1.0f, 3e38f, INFINITY};
  for (size_t i = 1; i < sizeof(v) / sizeof(v[0]); ++i) EXPECT_LT(samp::key_of(v[i - 1]), samp::key_of(v[i])) << i;
}

TEST(StepSampler, DistributionTemperature) {
  const auto l = random_logits(64, 7, 1.5f);
  SamplerParams p;
  p.temperature = 0.8f;
  const auto sp = StepSampler::make_params(p, 64, 11);
  check_distribution(l, sp, expected(l, 0.8f, 0, 0, 1), 100000);
}

TEST(StepSampler, DistributionTopKTopPMinP) {
  const auto l = random_logits(200, 9, 1.0f);
  SamplerParams p;
  p.temperature = 0.7f;
  p.top_k = 40;
  p.top_p = 0.8f;
  p.min_p = 0.05f;
  const auto sp = StepSampler::make_params(p, 200, 5);
  check_distribution(l, sp, expected(l, 0.7f, 40, 0.05f, 0.8f), 100000);
}

TEST(StepSampler, DistributionTopPOnly) {
  const auto l = random_logits(500, 3, 2.0f);
  SamplerParams p;
  p.top_p = 0.9f;
  const auto sp = StepSampler::make_params(p, 500, 99);
  check_distribution(l, sp, expected(l, 1.0f, 0, 0, 0.9f), 100000);
}

TEST(StepSampler, GreedyAndPenalties) {
  std::vector<float> l = {1.0f, 5.0f, 4.5f, -2.0f, 4.9f};
  SamplerParams p;
  p.temperature = 0;
  StepSampler a(p, {}, 5);
  EXPECT_EQ(a.pick(l.data()), 1);
  p.presence_penalty = 0.2f;  // token 1 generated once: 4.8 < 4.9
  StepSampler b(p, {}, 5);
  b.record(1);
  EXPECT_EQ(b.pick(l.data()), 4);
  SamplerParams r;
  r.temperature = 0;
  r.repetition_penalty = 1.2f;  // prompt tokens 1 and 4: 5/1.2, 4.9/1.2 < 4.5
  StepSampler c(r, {1, 4}, 5);
  EXPECT_EQ(c.pick(l.data()), 2);
  std::vector<float> nan = {NAN, 0.5f, NAN};  // NaN never wins
  StepSampler d(p, {}, 3);
  EXPECT_EQ(d.pick(nan.data()), 1);
}

TEST(StepSampler, TopKKeepsTiesAndExcludesTheRest) {
  // values 3, 2, 2, 1, 0: top-2 keeps 3 and both 2s, never 1 or 0
  std::vector<float> l = {2.0f, 0.0f, 3.0f, 1.0f, 2.0f};
  SamplerParams p;
  p.top_k = 2;
  p.temperature = 5.0f;  // flat: every kept token is drawn often
  StepSampler s(p, {}, 5);
  std::vector<int> cnt(5, 0);
  for (int i = 0; i < 3000; ++i) ++cnt[size_t(s.sample(l.data()))];
  EXPECT_GT(cnt[0], 500);
  EXPECT_GT(cnt[2], 500);
  EXPECT_GT(cnt[4], 500);
  EXPECT_EQ(cnt[1] + cnt[3], 0);
}

TEST(StepSampler, SeedRepeatsAndSeedsDiffer) {
  const auto l = random_logits(1000, 1, 1.0f);
  SamplerParams p;
  p.has_seed = true;
  p.seed = 42;
  p.frequency_penalty = 0.5f;
  StepSampler a(p, {}, 1000), b(p, {}, 1000);
  p.seed = 43;
  StepSampler c(p, {}, 1000);
  int differ = 0;
  for (int i = 0; i < 50; ++i) {
    const int32_t x = a.sample(l.data()), y = b.sample(l.data()), z = c.sample(l.data());
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 25);
  EXPECT_EQ(a.step(), 50u);
}

namespace {

// Logits with the argmax at (last id + 1) % V; counts the tokens consumed.
class CountingBackend : public Backend {
 public:
  CountingBackend() { cfg_.vocab = 16; }
  struct St : SeqState {
    std::unique_ptr<SeqState> clone() const override { return std::make_unique<St>(*this); }
    size_t bytes() const override { return 0; }
  };
  std::string name() const override { return "counting"; }
  const ModelConfig& config() const override { return cfg_; }
  std::unique_ptr<SeqState> new_state(int max_ctx) override {
    auto s = std::make_unique<St>();
    s->max_ctx = max_ctx;
    return s;
  }
  void forward(SeqState& st, const int32_t* ids, int n, int n_logits, float* out, const ForwardOptions&) override {
    st.pos += n;
    consumed.insert(consumed.end(), ids, ids + n);
    if (n_logits) {
      std::fill(out, out + cfg_.vocab, 0.0f);
      out[(ids[n - 1] + 1) % cfg_.vocab] = 10.0f;
    }
  }
  ModelConfig cfg_;
  std::vector<int32_t> consumed;
};

}  // namespace

TEST(StepSampler, DecodeSampleDefaultHasOneStepOfLookahead) {
  SamplerParams p;
  p.temperature = 0;
  for (int stop_at : {1, 2, 5, 8}) {
    CountingBackend be;
    auto st = be.new_state(100);
    StepSampler s(p, {}, 16);
    std::vector<int32_t> seen;
    std::vector<float> last(16);
    const int n = be.decode_sample(*st, s, 3, 8, [&](int32_t id) {
      seen.push_back(id);
      return int(seen.size()) < stop_at;
    }, last.data());
    const int want = std::min(stop_at + 1, 8);
    EXPECT_EQ(n, want) << stop_at;
    EXPECT_EQ(st->pos, want);
    ASSERT_EQ(int(seen.size()), stop_at);
    for (int i = 0; i < stop_at; ++i) EXPECT_EQ(seen[size_t(i)], 4 + i);
    // consumed: first id, then the emitted ids in order
    ASSERT_EQ(int(be.consumed.size()), want);
    EXPECT_EQ(be.consumed[0], 3);
    for (int i = 1; i < want; ++i) EXPECT_EQ(be.consumed[size_t(i)], seen[size_t(i - 1)]);
    EXPECT_EQ(std::max_element(last.begin(), last.end()) - last.begin(), (be.consumed.back() + 1) % 16);
    EXPECT_EQ(s.step(), uint64_t(stop_at));
  }
}

// With a mask: the greedy pick is the best allowed token (the model's favourite, id + 1, is refused every other step),
// the mask is called once per sampled token after on_token of the one before, and a false return stops before its
// token with every emitted token consumed.
TEST(StepSampler, DecodeSampleDefaultAppliesTheMask) {
  SamplerParams p;
  p.temperature = 0;
  CountingBackend be;
  auto st = be.new_state(100);
  StepSampler s(p, {}, 16);
  std::vector<int32_t> seen;
  int calls = 0;
  TokenMaskFn mask = [&](uint32_t* words) {
    EXPECT_EQ(size_t(calls), seen.size());  // after on_token of the previous token
    if (++calls == 6) return false;
    const int32_t prev = seen.empty() ? 3 : seen.back();
    words[0] = calls % 2 ? 0xffffu & ~(1u << ((prev + 1) % 16)) & ~(1u << 0) : 0xffffu;  // odd calls: refuse id + 1
    return true;
  };
  const int n = be.decode_sample(*st, s, 3, 20, [&](int32_t id) {
    seen.push_back(id);
    return true;
  }, nullptr, mask);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_EQ(n, 6);  // the first id and the 5 emitted ones
  EXPECT_EQ(st->pos, 6);
  int32_t prev = 3;
  for (size_t i = 0; i < seen.size(); ++i) {
    // all other logits are 0 and tie: the lowest allowed id wins when id + 1 is refused (0 is refused too)
    EXPECT_EQ(seen[i], i % 2 == 0 ? (prev + 1 == 1 ? 2 : 1) : (prev + 1) % 16) << i;
    prev = seen[i];
  }
}
