// Token-by-token Gated DeltaNet reference for the prefill tests (CPU ref_ops): over n tokens of raw projections
// proj [n][P] = qkv (conv_dim) | z (Hv*Dv) | b (Hv) | a (Hv), conv state and recurrent state starting at zero,
// gives the gated-normed f32 outputs want [n][Hv*Dv] and the final state S [Hv][Dv][Dk].
#pragma once
#include <cmath>
#include <vector>

#include "cpu/ref_ops.h"

namespace lily::testgdn {

inline void token_reference(const float* proj, int P, int n, const float* cw, const float* dtb, const float* an,
                            const float* nw, int Hk, int Hv, int Dk, int Dv, int K, std::vector<float>& want,
                            std::vector<float>& S) {
  const int kd = Hk * Dk, vd = Hv * Dv, cd = 2 * kd + vd;
  std::vector<float> cst(size_t(K - 1) * cd, 0.f), co(static_cast<size_t>(cd)), o(static_cast<size_t>(vd));
  std::vector<float> g(static_cast<size_t>(Hv)), be(static_cast<size_t>(Hv));
  S.assign(size_t(Hv) * Dv * Dk, 0.f);
  want.assign(size_t(n) * vd, 0.f);
  for (int t = 0; t < n; ++t) {
    const float* pr = &proj[size_t(t) * P];
    ref::conv_step(cst.data(), cw, pr, cd, K, co.data());
    for (int h = 0; h < 2 * Hk; ++h) {  // q (also * 1/sqrt(Dk)) and k heads l2-normalised
      float* x = &co[size_t(h) * Dk];
      double ss = 0;
      for (int i = 0; i < Dk; ++i) ss += double(x[i]) * x[i];
      const float sc = float(1.0 / std::sqrt(ss + 1e-6)) * (h < Hk ? 1.f / std::sqrt(float(Dk)) : 1.f);
      for (int i = 0; i < Dk; ++i) x[i] *= sc;
    }
    for (int j = 0; j < Hv; ++j) {
      be[size_t(j)] = ref::sigmoid(pr[cd + vd + j]);
      g[size_t(j)] = an[j] * ref::softplus(pr[cd + vd + Hv + j] + dtb[j]);
    }
    ref::gdn_step(S.data(), co.data(), co.data() + kd, co.data() + 2 * kd, g.data(), be.data(), Hk, Hv, Dk, Dv,
                  o.data());
    ref::gated_rmsnorm(o.data(), pr + cd, nw, Hv, Dv, 1e-6f, &want[size_t(t) * vd]);
  }
}

}  // namespace lily::testgdn
