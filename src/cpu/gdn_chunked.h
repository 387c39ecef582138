// Chunked (WY / UT-transform) form of the gated delta rule, plain f32 C++: the oracle for the CUDA chunked
// prefill kernels (src/cuda/prefill/prefill_gdn.cu), itself tested against token-by-token ref::gdn_step.
#pragma once

namespace lily::ref {

// log decays below this are raised to it (exp(-200) is 0 in f32, like exp(g) for any smaller g)
inline constexpr double kGdnLogDecayFloor = -200.0;

// Same math as n successive ref::gdn_step calls, computed C tokens at a time per value head.
//  q, k [n][Hk][Dk] (l2-normalised, q * 1/sqrt(Dk)), v [n][Hv][Dv], g, beta [n][Hv] (g = log decay <= 0)
//  S [Hv][Dv][Dk] state in/out (row v = S[:, v] of the math), o [n][Hv][Dv]; value head j uses key head
//  j / (Hv/Hk). With M = the stored [Dv][Dk] state of one head, chunk tokens t = 0..L-1 (L <= C),
//  G_t = g_0 + ... + g_t:
//    A[t][s] = beta_t (k_t.k_s) exp(G_t - G_s)  (s < t),  T = (I + A)^-1
//    W = T diag(beta) (K * exp(G)),  U = T diag(beta) V,  P[t][s] = (q_t.k_s) exp(G_t - G_s)  (s <= t)
//    D = U - W M^T  (row t = the delta of token t),  O = (Q * exp(G)) M^T + P D
//    M <- exp(G_{L-1}) M + sum_t exp(G_{L-1} - G_t) d_t k_t^T
void gdn_chunked(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
                 int n, int Hk, int Hv, int Dk, int Dv, int C, float* o);

}  // namespace lily::ref
