// The chunked (WY / UT-transform) gated delta rule (ref::gdn_chunked) against token-by-token ref::gdn_step on
// random inputs: sequence lengths that are not multiples of the chunk, a carried-in state, strong and weak decay
// (incl. g = -inf), several chunk sizes. Runs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "test_metrics.h"
#include "cpu/gdn_chunked.h"
#include "cpu/ref_ops.h"

using namespace lily;

namespace {


struct Inputs {
  std::vector<float> q, k, v, g, beta, S0;
};

// decay: 0 weak (g in [-0.05, 0]), 1 mixed (g in [-8, 0]), 2 strong (g in [-60, -2] and some -inf)
Inputs make(int n, int Hk, int Hv, int Dk, int Dv, int decay, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f), u01(0.f, 1.f);
  Inputs in;
  in.q.resize(size_t(n) * Hk * Dk);
  in.k.resize(in.q.size());
  in.v.resize(size_t(n) * Hv * Dv);
  in.g.resize(size_t(n) * Hv);
  in.beta.resize(in.g.size());
  in.S0.resize(size_t(Hv) * Dv * Dk);
  for (auto* x : {&in.q, &in.k}) {
    for (auto& e : *x) e = u(rng);
    for (size_t h = 0; h < x->size(); h += size_t(Dk)) {  // l2-normalise each head (q also / sqrt(Dk))
      double ss = 0;
      for (int i = 0; i < Dk; ++i) ss += double((*x)[h + i]) * (*x)[h + i];
      const float sc = float(1.0 / std::sqrt(ss + 1e-6)) * (x == &in.q ? 1.f / std::sqrt(float(Dk)) : 1.f);
      for (int i = 0; i < Dk; ++i) (*x)[h + i] *= sc;
    }
  }
  for (auto& e : in.v) e = u(rng);
  for (auto& e : in.S0) e = u(rng);
  for (auto& e : in.beta) e = ref::sigmoid(3.f * u(rng));
  for (auto& e : in.g) {
    if (decay == 0) e = -0.05f * u01(rng);
    else if (decay == 1) e = -8.f * u01(rng) * u01(rng);
    else e = u01(rng) < 0.05f ? -INFINITY : -2.f - 58.f * u01(rng);
  }
  return in;
}

struct Case {
  int n, C, decay;
};

class GdnChunked : public ::testing::TestWithParam<Case> {};

TEST_P(GdnChunked, EqualsTokenByTokenReference) {
  const Case cs = GetParam();
  const int Hk = 2, Hv = 4, Dk = 64, Dv = 32, n = cs.n;
  const Inputs in = make(n, Hk, Hv, Dk, Dv, cs.decay, unsigned(1000 * cs.n + 10 * cs.C + cs.decay));
  // reference: token by token from S0
  std::vector<float> S = in.S0, want(size_t(n) * Hv * Dv);
  for (int t = 0; t < n; ++t)
    ref::gdn_step(S.data(), &in.q[size_t(t) * Hk * Dk], &in.k[size_t(t) * Hk * Dk], &in.v[size_t(t) * Hv * Dv],
                  &in.g[size_t(t) * Hv], &in.beta[size_t(t) * Hv], Hk, Hv, Dk, Dv, &want[size_t(t) * Hv * Dv]);
  // chunked, in two calls (state carried between them) when n > 1
  std::vector<float> S2 = in.S0, got(want.size(), NAN);
  const int n1 = n > 1 ? n / 3 + 1 : n;
  ref::gdn_chunked(S2.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n1, Hk, Hv, Dk,
                   Dv, cs.C, got.data());
  if (n > n1)
    ref::gdn_chunked(S2.data(), &in.q[size_t(n1) * Hk * Dk], &in.k[size_t(n1) * Hk * Dk],
                     &in.v[size_t(n1) * Hv * Dv], &in.g[size_t(n1) * Hv], &in.beta[size_t(n1) * Hv], n - n1, Hk, Hv,
                     Dk, Dv, cs.C, &got[size_t(n1) * Hv * Dv]);
  const double eo = testmetrics::max_rel_err(got, want), es = testmetrics::max_rel_err(S2, S);
  std::printf("[ gdn chunked ] n %d C %d decay %d: o %.2e  S %.2e\n", n, cs.C, cs.decay, eo, es);
  EXPECT_LT(eo, 2e-5);
  EXPECT_LT(es, 2e-5);
}

INSTANTIATE_TEST_SUITE_P(Lengths, GdnChunked,
                         ::testing::Values(Case{1, 64, 1}, Case{63, 64, 0}, Case{64, 64, 1}, Case{65, 64, 2},
                                           Case{200, 64, 0}, Case{200, 64, 1}, Case{200, 64, 2}, Case{150, 16, 1},
                                           Case{150, 32, 0}, Case{97, 1, 1}));

TEST(GdnChunkedCheck, DetectsAWrongDecay) {  // the comparison above can fail: one changed g moves the output
  const int Hk = 1, Hv = 2, Dk = 32, Dv = 16, n = 70;
  Inputs in = make(n, Hk, Hv, Dk, Dv, 0, 7);
  std::vector<float> S = in.S0, want(size_t(n) * Hv * Dv), got(want.size());
  for (int t = 0; t < n; ++t)
    ref::gdn_step(S.data(), &in.q[size_t(t) * Hk * Dk], &in.k[size_t(t) * Hk * Dk], &in.v[size_t(t) * Hv * Dv],
                  &in.g[size_t(t) * Hv], &in.beta[size_t(t) * Hv], Hk, Hv, Dk, Dv, &want[size_t(t) * Hv * Dv]);
  in.g[size_t(40) * Hv] -= 0.01f;
  std::vector<float> S2 = in.S0;
  ref::gdn_chunked(S2.data(), in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), n, Hk, Hv, Dk, Dv,
                   64, got.data());
  EXPECT_GT(testmetrics::max_rel_err(got, want), 2e-5);
}

}  // namespace
