// Reference kernels in plain f32 (readable, slow): the oracle every fast kernel (CPU SIMD, CUDA) is tested
// against, and the CPU reference forward pass. Shapes in comments; all arrays are row-major.
#pragma once
#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace lily::ref {

// y[r] = sum_c W[r][c] * x[c];  W [rows, cols], x [cols], y [rows]
void matvec(const QMatrix& W, const float* x, float* y);
// Y[i][r] = sum_c W[r][c] * X[i][c];  X [n, cols], Y [n, rows]
void matmul(const QMatrix& W, const float* X, int n, float* Y);
// y = x / sqrt(mean(x^2) + eps) * w;  x, w, y [n] (y may alias x)
void rmsnorm(const float* x, const float* w, int n, float eps, float* y);
// NeoX half-split rotary on the first rope_dim dims of one head x [head_dim] at position pos.
void rope_neox(float* x, int rope_dim, int pos, double theta);
inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
float softplus(float x);

// MoE router: probs = softmax(logits[E]); top-k by prob (ties -> lower index); weights renormalised to sum 1.
void route_topk(const float* logits, int n_experts, int k, int* idx, float* weight);

// Depthwise causal conv + SiLU for one token. state [K-1][C] holds the previous raw inputs (oldest first),
// w [C][K] (tap K-1 multiplies x), x [C] raw input; out [C]; state shifted and x appended.
void conv_step(float* state, const float* w, const float* x, int C, int K, float* out);

// One gated delta-rule step for all value heads, in place on S.
//  q, k [Hk][Dk] (already l2-normalised; q scaled by 1/sqrt(Dk)), v [Hv][Dv], g [Hv] (log decay), beta [Hv]
//  S [Hv][Dv][Dk] (fp32; row v holds S[:, v] of the math, contiguous over Dk), out o [Hv][Dv]
//  value head j uses key head j / (Hv/Hk).
void gdn_step(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
              int Hk, int Hv, int Dk, int Dv, float* o);

// n consecutive gdn_step calls (a prefill chunk): token t reads q + t·xs, k + t·xs, v + t·xs (rows of one
// [n][xs] buffer), g + t·Hv, beta + t·Hv and writes o + t·Hv·Dv. snaps (optional): the state after each of the
// first n_snaps tokens (n_snaps <= n), token t's at snaps + t·Hv·Dv·Dk (a speculative verify's rewind points).
void gdn_scan(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g, const float* beta,
              int n, int Hk, int Hv, int Dk, int Dv, float* o, float* snaps = nullptr, int n_snaps = 0);

// Gated RMSNorm per head: y = rmsnorm(o; w) * silu(z); o, z, y [Hv][Dv], w [Dv]
void gated_rmsnorm(const float* o, const float* z, const float* w, int Hv, int Dv, float eps, float* y);

// Causal attention of one query position over the cache.
//  q [nq][hd]; kcache, vcache [T][nkv][hd] (T = positions 0..T-1 visible); out [nq][hd].
//  Query head h reads kv head h / (nq/nkv); scale 1/sqrt(hd); softmax in f32.
void attention_one(const float* q, const float* kcache, const float* vcache, int T, int nq, int nkv, int hd,
                   float* out);

}  // namespace lily::ref
