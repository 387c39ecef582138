// Derivation (per value head; M = stored state [Dv][Dk], i.e. S^T of the math). The recurrence of gdn_step is
//   M_t = a_t M_{t-1} + d_t k_t^T,  d_t = beta_t (v_t - a_t M_{t-1} k_t),  o_t = M_t q_t,  a_t = exp(g_t).
// By induction over the chunk (M_{-1} = incoming state, G_t = g_0 + ... + g_t):
//   M_t = exp(G_t) M_{-1} + sum_{s<=t} exp(G_t - G_s) d_s k_s^T.
// Substituting M_{t-1} into d_t:
//   d_t + sum_{s<t} beta_t (k_t.k_s) exp(G_t - G_s) d_s = beta_t v_t - beta_t exp(G_t) M_{-1} k_t,
// i.e. (I + A) D = diag(beta) V - diag(beta) (K * exp(G)) M_{-1}^T, so D = U - W M_{-1}^T. Then
//   o_t = exp(G_t) M_{-1} q_t + sum_{s<=t} exp(G_t - G_s) (q_t.k_s) d_s  and the state after the chunk is
//   M_{L-1} = exp(G_{L-1}) M_{-1} + sum_s exp(G_{L-1} - G_s) d_s k_s^T.
// G is summed in double and every exp takes a difference of those sums (no exp(+x) factors, no 0 * inf); g is
// floored at kGdnLogDecayFloor (-200: exp underflows to 0 in f32 either way, and g = -inf cannot make
// -inf - -inf = NaN).
#include "cpu/gdn_chunked.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace lily::ref {

void gdn_chunked(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int n, int Hk, int Hv, int Dk, int Dv, int C, float* o) {
  const int rep = Hv / Hk;
  std::vector<double> G(static_cast<size_t>(C));
  std::vector<float> A(size_t(C) * C), P(size_t(C) * C), W(size_t(C) * Dk), U(size_t(C) * Dv), D(size_t(C) * Dv);
  for (int j = 0; j < Hv; ++j) {
    const int hk = j / rep;
    float* M = S + size_t(j) * Dv * Dk;
    for (int c0 = 0; c0 < n; c0 += C) {
      const int L = std::min(C, n - c0);
      auto K_ = [&](int t) { return k + (size_t(c0 + t) * Hk + hk) * Dk; };
      auto Q_ = [&](int t) { return q + (size_t(c0 + t) * Hk + hk) * Dk; };
      auto V_ = [&](int t) { return v + (size_t(c0 + t) * Hv + j) * Dv; };
      auto B_ = [&](int t) { return beta[size_t(c0 + t) * Hv + j]; };
      double acc = 0;
      for (int t = 0; t < L; ++t)
        G[size_t(t)] = acc += std::max(double(g[size_t(c0 + t) * Hv + j]), kGdnLogDecayFloor);
      for (int t = 0; t < L; ++t)
        for (int s = 0; s < L; ++s) {
          float kk = 0, qk = 0;
          for (int d = 0; d < Dk; ++d) { kk += K_(t)[d] * K_(s)[d]; qk += Q_(t)[d] * K_(s)[d]; }
          const float e = s <= t ? float(std::exp(G[size_t(t)] - G[size_t(s)])) : 0.f;
          A[size_t(t) * C + s] = s < t ? B_(t) * kk * e : 0.f;
          P[size_t(t) * C + s] = s <= t ? qk * e : 0.f;
        }
      // W, U by forward substitution: row t = beta_t [k_t exp(G_t) | v_t] - sum_{s<t} A[t][s] row s
      for (int t = 0; t < L; ++t) {
        const float eg = float(std::exp(G[size_t(t)]));
        for (int d = 0; d < Dk; ++d) {
          float x = B_(t) * eg * K_(t)[d];
          for (int s = 0; s < t; ++s) x -= A[size_t(t) * C + s] * W[size_t(s) * Dk + d];
          W[size_t(t) * Dk + d] = x;
        }
        for (int r = 0; r < Dv; ++r) {
          float x = B_(t) * V_(t)[r];
          for (int s = 0; s < t; ++s) x -= A[size_t(t) * C + s] * U[size_t(s) * Dv + r];
          U[size_t(t) * Dv + r] = x;
        }
      }
      // D = U - W M^T
      for (int t = 0; t < L; ++t)
        for (int r = 0; r < Dv; ++r) {
          float x = U[size_t(t) * Dv + r];
          for (int d = 0; d < Dk; ++d) x -= W[size_t(t) * Dk + d] * M[size_t(r) * Dk + d];
          D[size_t(t) * Dv + r] = x;
        }
      // O = (Q * exp(G)) M^T + P D   (old state)
      for (int t = 0; t < L; ++t) {
        const float eg = float(std::exp(G[size_t(t)]));
        float* ot = o + (size_t(c0 + t) * Hv + j) * Dv;
        for (int r = 0; r < Dv; ++r) {
          float x = 0;
          for (int d = 0; d < Dk; ++d) x += Q_(t)[d] * M[size_t(r) * Dk + d];
          x *= eg;
          for (int s = 0; s <= t; ++s) x += P[size_t(t) * C + s] * D[size_t(s) * Dv + r];
          ot[r] = x;
        }
      }
      // M <- exp(G_last) M + sum_t exp(G_last - G_t) d_t k_t^T
      const double GL = G[size_t(L - 1)];
      const float eL = float(std::exp(GL));
      std::vector<float> ed(static_cast<size_t>(L));
      for (int t = 0; t < L; ++t) ed[size_t(t)] = float(std::exp(GL - G[size_t(t)]));
      for (int r = 0; r < Dv; ++r)
        for (int d = 0; d < Dk; ++d) {
          float x = eL * M[size_t(r) * Dk + d];
          for (int t = 0; t < L; ++t) x += ed[size_t(t)] * D[size_t(t) * Dv + r] * K_(t)[d];
          M[size_t(r) * Dk + d] = x;
        }
    }
  }
}

}  // namespace lily::ref
