// Chunked (WY / UT-transform) Gated DeltaNet delta rule on tensor cores: the math of ref::gdn_chunked
// (derivation: src/cpu/gdn_chunked.*), dispatched by prefill_gdn_chunked.cu where GdnChunkArgs::chunked. Per value
// head j, chunks of C = 64 tokens, M = the stored [Dv][Dk] state:
//  k_prep_tc, grid (chunk, head), 256 threads, all chunks at once:
//    G (cumulative log decay within the chunk, summed in double, g floored at -200), beta, eg = exp(G),
//    ed = exp(G_last - G), eL = exp(G_last);
//    K K^T and Q K^T (3xTF32 mma) -> A = beta_t (k_t.k_s) exp(G_t - G_s) (s < t), P (s <= t);
//    T = (I + A)^-1 in f32 by 16x16 blocks (diagonal blocks by forward substitution, one thread per column;
//    T_ij = -T_ii sum_{k=j..i-1} A_ik T_kj level by level); W = T diag(beta eg) K and U = T diag(beta) V (3xTF32
//    mma). Scratch: W and U in f32, Q * eg, P and (K * ed)^T in fp16 (layout: TcWs).
//  k_cscan_tc, grid (head, Dv / 32), 256 threads, sequential over chunks, the block's 32 rows of M as tf32 mma
//    accumulators (fp32) in registers for the whole call; the chunk's W, Qg, (K ed)^T, P, U tiles double-buffered
//    with cp.async (chunk c + 1 loads while c computes). Per chunk:
//      phase 1: D = U - W M^T (3xTF32) and O = (Q eg) M^T (8 warps: 16 tokens x 16 value rows each, M^T read
//               from an f32 copy of M in shared memory), D^T -> shared memory (tf32);
//      phase 2: O += P D (lower-triangular k-steps only) -> obuf;  M <- eL M + D^T (K ed)  (8 warps: 16 value rows
//               x Dk/4 columns each), then the f32 copy of M for the next chunk.
// Precision. A tf32 mma.sync m16n8k8 rounds its operands to 10 explicit mantissa bits (u = 2^-11 relative each)
// and accumulates in f32, so a plain tf32 dot product is off by up to 2u sum|a_i b_i|: fine where the result is
// of the size of that sum, not where it cancels. The products that cancel run as 3xTF32 (x = hi + lo, hi =
// tf32(x), lo = tf32(x - hi); a.b ~ a_hi.b_hi + a_hi.b_lo + a_lo.b_hi, error ~2^-21 sum|a_i b_i|, about f32):
//   * Q K^T (P): q_t.k_s is mostly far below |q||k|, and o_t sums P_ts d_s over the chunk; measured, this one
//     product carried most of the end-to-end error (tiny fixture, split precision: 0.025 -> 0.004 max |dlogit|);
//   * K K^T (A), then W = T diag(beta eg) K and U = T diag(beta) V: D = U - W M^T cancels when the state already
//     predicts v, so W, U and W M^T need errors far below |U| (W is kept in f32 for it, split at the fragment
//     load; M's f32 copy is split likewise).
// The rest stays single tf32 with fp16 operand storage where that is exact: Q eg, K ed and P are stored fp16
// (the same 10-bit mantissa; fp16 -> tf32 is exact; ranges fit: q, k are l2-normalised, |k| <= 1, |q| <=
// 1/sqrt(Dk), every decay factor <= 1, so |q eg|, |k ed|, |P| <= 1; values below fp16's normal range, 6e-5, keep
// an absolute error <= 2^-25). (Q eg) M^T uses M's tf32 part, P D and D^T (K ed) the tf32 D: these do not cancel
// (outputs and the state update, errors <= 2u of their scale; tests/test_cuda_prefill_gdn_chunked.cpp derives
// its bound). The state M itself is never rounded: it stays f32 in the mma accumulators. G and the decay factors
// in double. Cost of the 3xTF32 products at the 35B head sizes, n = 4096, H200: delta rule
// 0.49 -> 0.68 ms, conv + delta rule + norm 0.76 -> 0.95 ms (the sequential f32 scan: 1.38 ms).
#include <algorithm>
#include <cstdint>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kC = kGdnChunk;  // 64: the tile maps below assume it
static_assert(kC == 64, "k_prep_tc / k_cscan_tc tile maps are written for 64-token chunks");
constexpr int kThreads = 256;  // 8 warps in both kernels
constexpr int kRB = 32;        // k_cscan_tc: value rows of M per block
constexpr int kDvMax = 128;    // k_prep_tc: widest V tile

// Scratch of the tensor-core path, per value head j (np = nc * C padded token rows; rows past the chunk's end
// are written as zeros):
//   W [Hv][np][Dk] f32, Q [Hv][np][Dk] fp16 (q * eg), P [Hv][np][C] fp16, KT [Hv][nc][Dk][C] fp16 ((k * ed)^T
//   per chunk), U [Hv][np][Dv] f32, eL [Hv][nc] f32. Every part starts 16-byte aligned (np % 64 == 0).
struct TcWs {
  float* W;
  __half *Q, *P, *KT;
  float *U, *eL;
};
__host__ __device__ inline TcWs tc_ws(float* ws, int n, int Hv, int Dk, int Dv) {
  const int64_t nc = (n + kC - 1) / kC, np = nc * kC;
  TcWs w;
  w.W = ws;
  w.Q = reinterpret_cast<__half*>(ws + Hv * np * Dk);
  w.P = w.Q + Hv * np * Dk;
  w.KT = w.P + Hv * np * kC;
  w.U = reinterpret_cast<float*>(w.KT + Hv * np * Dk);
  w.eL = w.U + Hv * np * Dv;
  return w;
}

__device__ __forceinline__ float tf32r(float x) { return __uint_as_float(f2tf32(x)); }
// x = hi + lo with hi = tf32(x) and lo = tf32(x - hi): hi + lo carries ~22 significant bits (3xTF32 operands)
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = f2tf32(x) & 0xffffe000u;
  lo = f2tf32(x - __uint_as_float(hi));
}
// d += (ah + al) (bh + bl) less the al bl term (3xTF32: relative error ~2^-21 of sum |a_i b_i|)
__device__ __forceinline__ void mma3_tf32(float (&d)[4], const uint32_t (&ah)[4], const uint32_t (&al)[4],
                                          uint32_t bh0, uint32_t bh1, uint32_t bl0, uint32_t bl1) {
  mma1688_tf32(d, al, bh0, bh1);
  mma1688_tf32(d, ah, bl0, bl1);
  mma1688_tf32(d, ah, bh0, bh1);
}
__device__ __forceinline__ float2 h2f(uint32_t u) {  // .x = low half, .y = high half
  return __half22float2(*reinterpret_cast<const __half2*>(&u));
}
// A fragments of two k-steps from 16-bit rows: r0 = 4 halves of row g at columns kb + 4c .. kb + 4c + 3, r1 the
// same of row g + 8. k permuted within the pair of k-steps (the B side uses the same map): k-step 0 puts column
// kb + 4c in slot c and kb + 4c + 1 in slot c + 4, k-step 1 puts kb + 4c + 2 and kb + 4c + 3 there; the two steps
// cover kb .. kb + 15 once. fp16 -> f32 is exact and already a tf32 value, so no cvt.
__device__ __forceinline__ void frag_a_h(uint32_t (&a)[2][4], uint2 r0, uint2 r1) {
  const float2 x0 = h2f(r0.x), x1 = h2f(r1.x), y0 = h2f(r0.y), y1 = h2f(r1.y);
  a[0][0] = __float_as_uint(x0.x); a[0][1] = __float_as_uint(x1.x);  // a0 (g, c), a1 (g+8, c)
  a[0][2] = __float_as_uint(x0.y); a[0][3] = __float_as_uint(x1.y);  // a2 (g, c+4), a3 (g+8, c+4)
  a[1][0] = __float_as_uint(y0.x); a[1][1] = __float_as_uint(y1.x);
  a[1][2] = __float_as_uint(y0.y); a[1][3] = __float_as_uint(y1.y);
}

// ---------------------------------------------------------------------------------------------------------------
// k_prep_tc shared memory (floats unless noted). Ks/Qs rows have DK + 8 floats (== 8 mod 32 words: the float2
// fragment loads of the A/P products and the scalar B loads of the W product hit 32 distinct banks), As/Ts rows
// C + 4 (== 4 mod 32: scalar A loads conflict-free). The Q region holds V after the A/P products.
template <int DK>
struct PrepL {
  static constexpr int LK = DK + 8, LV = kDvMax + 8, LT = kC + 4, LQV = LK > LV ? LK : LV;
  static constexpr size_t K_OFF = 0;
  static constexpr size_t QV_OFF = K_OFF + sizeof(float) * kC * LK;
  static constexpr size_t A_OFF = QV_OFF + sizeof(float) * kC * LQV;
  static constexpr size_t T_OFF = A_OFF + sizeof(float) * kC * LT;
  static constexpr size_t G_OFF = T_OFF + sizeof(float) * kC * LT;  // double G[C]
  static constexpr size_t S_OFF = G_OFF + sizeof(double) * kC;      // sb, eg, ed, cw [C]
  static constexpr size_t BYTES = S_OFF + sizeof(float) * 4 * kC;
};

template <int DK>
__global__ void __launch_bounds__(kThreads, 2) k_prep_tc(const GdnChunkArgs g) {
  using Lay = PrepL<DK>;
  constexpr int LK = Lay::LK, LV = Lay::LV, LT = Lay::LT;
  extern __shared__ __align__(16) unsigned char smraw[];
  float* Ks = reinterpret_cast<float*>(smraw + Lay::K_OFF);
  float* Qs = reinterpret_cast<float*>(smraw + Lay::QV_OFF);
  float* Vs = Qs;  // after the A/P products
  float* As = reinterpret_cast<float*>(smraw + Lay::A_OFF);
  float* Ts = reinterpret_cast<float*>(smraw + Lay::T_OFF);
  double* G = reinterpret_cast<double*>(smraw + Lay::G_OFF);
  float* sb = reinterpret_cast<float*>(smraw + Lay::S_OFF);
  float* eg = sb + kC;
  float* ed = eg + kC;
  float* cw = ed + kC;  // beta * eg: the column scale of T for W
  const int Dv = g.Dv, Hv = g.Hv, c = blockIdx.x, j = blockIdx.y, c0 = c * kC, L = min(kC, g.n - c0);
  const int hk = j / (Hv / g.Hk), key_dim = g.Hk * DK, vd = Hv * Dv, cd = 2 * key_dim + vd;
  const int nc = (g.n + kC - 1) / kC;
  const int64_t np = int64_t(nc) * kC, rb = int64_t(j) * np + c0;  // this chunk's first row in W/Q/P/U
  const TcWs w = tc_ws(g.ws, g.n, Hv, DK, Dv);
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, gq = lane >> 2, tq = lane & 3;

  if (tid < kC) {  // beta and the floored log decay per token (zero past L)
    const int t = tid;
    float b = 0.f;
    double gd = 0.0;
    if (t < L) {
      const float* pr = g.proj + int64_t(c0 + t) * g.ldp + cd + vd;
      b = 1.f / (1.f + expf(-pr[j]));
      const float xa = pr[Hv + j] + g.dt_bias[j];
      const float sp = xa > 20.f ? xa : log1pf(expf(xa));
      gd = fmax(double(g.a_neg[j] * sp), -200.0);
    }
    sb[t] = b;
    G[t] = gd;
  }
  for (int i = tid; i < kC * DK / 4; i += kThreads) {  // K, Q tiles (f32, zero rows past L)
    const int t = i / (DK / 4), d = (i % (DK / 4)) * 4;
    float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), qv = kv;
    if (t < L) {
      const float* row = g.cbuf + int64_t(c0 + t) * cd;
      kv = *reinterpret_cast<const float4*>(row + key_dim + hk * DK + d);
      qv = *reinterpret_cast<const float4*>(row + hk * DK + d);
    }
    *reinterpret_cast<float4*>(Ks + t * LK + d) = kv;
    *reinterpret_cast<float4*>(Qs + t * LK + d) = qv;
  }
  __syncthreads();
  if (tid == 0) {  // cumulative sums in order (G[t] = G[L-1] past L)
    double acc = 0.0;
    for (int t = 0; t < kC; ++t) G[t] = acc += G[t];
  }
  __syncthreads();
  if (tid < kC) {
    const int t = tid;
    const double GL = G[L - 1];
    const float e1 = t < L ? float(exp(G[t])) : 0.f, e2 = t < L ? float(exp(GL - G[t])) : 0.f;
    eg[t] = e1;
    ed[t] = e2;
    cw[t] = sb[t] * e1;
    if (t == 0) w.eL[int64_t(j) * nc + c] = float(exp(GL));
  }
  __syncthreads();
  // Q * eg -> Q16 (rows), (K * ed)^T -> KT16 ([d][s], 8 tokens per 16-byte store; lanes over d)
  for (int i = tid; i < kC * DK / 2; i += kThreads) {
    const int t = i / (DK / 2), d = (i % (DK / 2)) * 2;
    const float e = eg[t];
    const float2 q = *reinterpret_cast<const float2*>(Qs + t * LK + d);
    *reinterpret_cast<uint32_t*>(w.Q + (rb + t) * DK + d) = pack_h2(q.x * e, q.y * e);
  }
  for (int i = tid; i < DK * (kC / 8); i += kThreads) {
    const int d = i % DK, s0 = (i / DK) * 8;
    uint32_t h[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      const int s = s0 + 2 * p;
      h[p] = pack_h2(Ks[s * LK + d] * ed[s], Ks[(s + 1) * LK + d] * ed[s + 1]);
    }
    *reinterpret_cast<uint4*>(w.KT + ((int64_t(j) * nc + c) * DK + d) * kC + s0) = make_uint4(h[0], h[1], h[2], h[3]);
  }
  {  // S = K K^T (warps 0-3) and Q K^T (warps 4-7): warp = 16 rows t (m-tile mt) x the 8 n-tiles of s <= t
    const int mt = wid & 3;
    const bool isP = wid >= 4;
    const float* X = isP ? Qs : Ks;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.f;
#pragma unroll 4
    for (int ks = 0; ks < DK / 8; ++ks) {
      // k permuted within the k-step (both operands alike): slot c <- d = 8ks + 2c, slot c + 4 <- 8ks + 2c + 1.
      // A (row t, k d) = X[t][d]: a0 (g, c) = x0.x, a1 (g+8, c) = x1.x, a2 (g, c+4) = x0.y, a3 (g+8, c+4) = x1.y.
      const float2 x0 = *reinterpret_cast<const float2*>(X + (16 * mt + gq) * LK + 8 * ks + 2 * tq);
      const float2 x1 = *reinterpret_cast<const float2*>(X + (16 * mt + gq + 8) * LK + 8 * ks + 2 * tq);
      uint32_t a[4], al[4];
      split_tf32(x0.x, a[0], al[0]); split_tf32(x1.x, a[1], al[1]);
      split_tf32(x0.y, a[2], al[2]); split_tf32(x1.y, a[3], al[3]);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt)
        if (nt <= 2 * mt + 1) {  // B (k d, col s) = K[s][d], s = 8nt + g: b0 (c, g) = kb.x, b1 (c+4, g) = kb.y
          const float2 kb = *reinterpret_cast<const float2*>(Ks + (8 * nt + gq) * LK + 8 * ks + 2 * tq);
          uint32_t b0, b1, bl0, bl1;
          split_tf32(kb.x, b0, bl0);
          split_tf32(kb.y, b1, bl1);
          mma3_tf32(acc[nt], a, al, b0, b1, bl0, bl1);
        }
    }
    // d_i at (t = 16mt + g + 8(i >> 1), s = 8nt + 2c + (i & 1))
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      float v[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = 16 * mt + gq + 8 * (i >> 1), s = 8 * nt + 2 * tq + (i & 1);
        const float e = (s <= t && t < L) ? expf(float(G[t] - G[s])) : 0.f;
        v[i] = acc[nt][i] * e;
        if (!isP) As[t * LT + s] = s < t ? sb[t] * v[i] : 0.f;
      }
      if (isP) {
        const int t = 16 * mt + gq, s = 8 * nt + 2 * tq;
        *reinterpret_cast<uint32_t*>(w.P + (rb + t) * kC + s) = pack_h2(v[0], v[1]);
        *reinterpret_cast<uint32_t*>(w.P + (rb + t + 8) * kC + s) = pack_h2(v[2], v[3]);
      }
    }
  }
  __syncthreads();
  for (int i = tid; i < kC * Dv / 4; i += kThreads) {  // V tile into the Q region (zero rows past L)
    const int t = i / (Dv / 4), v = (i % (Dv / 4)) * 4;
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
    if (t < L) x = *reinterpret_cast<const float4*>(g.cbuf + int64_t(c0 + t) * cd + 2 * key_dim + j * Dv + v);
    *reinterpret_cast<float4*>(Vs + t * LV + v) = x;
  }
  // T = (I + A)^-1. Diagonal blocks: (I + A_ii) x = e_cc by forward substitution, thread (block i, column cc).
  if (tid < kC) {
    const int i = tid >> 4, cc = tid & 15;
    const float* a = As + 16 * i * LT + 16 * i;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float v = r == cc ? 1.f : 0.f;
#pragma unroll
      for (int s = 0; s < r; ++s) v = fmaf(-a[r * LT + s], x[s], v);
      x[r] = v;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) Ts[(16 * i + r) * LT + 16 * i + cc] = x[r];  // zeros above the diagonal too
  }
  __syncthreads();
  // Off-diagonal blocks by distance dl = i - jb: T_ij = -T_ii Y, Y = sum_{k=jb..i-1} A_ik T_kj (Y parked in the
  // T_ij slot); thread = element (r, cc) of each of the 4 - dl blocks of the level.
  {
    const int r = tid >> 4, cc = tid & 15;
#pragma unroll
    for (int dl = 1; dl < 4; ++dl) {
#pragma unroll
      for (int jb = 0; jb + dl < 4; ++jb) {
        const int i = jb + dl;
        float v = 0.f;
        for (int k = jb; k < i; ++k)
#pragma unroll
          for (int s = 0; s < 16; ++s) v = fmaf(As[(16 * i + r) * LT + 16 * k + s], Ts[(16 * k + s) * LT + 16 * jb + cc], v);
        Ts[(16 * i + r) * LT + 16 * jb + cc] = v;
      }
      __syncthreads();
      float y[3];
#pragma unroll
      for (int jb = 0; jb + dl < 4; ++jb) {
        const int i = jb + dl;
        float v = 0.f;
#pragma unroll
        for (int s = 0; s < 16; ++s) v = fmaf(Ts[(16 * i + r) * LT + 16 * i + s], Ts[(16 * i + s) * LT + 16 * jb + cc], v);
        y[jb] = -v;
      }
      __syncthreads();
#pragma unroll
      for (int jb = 0; jb + dl < 4; ++jb) Ts[(16 * (jb + dl) + r) * LT + 16 * jb + cc] = y[jb];
      __syncthreads();
    }
  }
  // [W | U] = T diag(cs) [K | V] (cs = beta eg for W, beta for U): warp = 32 columns of [W | U], all 64 rows.
  const int x0 = 32 * wid;
  if (x0 < DK + Dv) {
    const bool isU = x0 >= DK;
    const float* X = isU ? Vs : Ks;
    const int LX = isU ? LV : LK, xc = isU ? x0 - DK : x0, ncol = isU ? min(32, Dv - xc) : 32;
    const float* cs = isU ? sb : cw;
    float acc[4][4][4];
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kC / 8; ++ks) {
      // standard k order (k = s): B (k s, col x) = X[s][x]: b0 (c, g) = X[8ks + c][xc + 8nt + g], b1 (c+4, g)
      uint32_t b[4][2], bl[4][2];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const int col = min(xc + 8 * nt, xc + ncol - 8) + gq;  // clamped for the unused n-tiles of a short U warp
        split_tf32(X[(8 * ks + tq) * LX + col], b[nt][0], bl[nt][0]);
        split_tf32(X[(8 * ks + tq + 4) * LX + col], b[nt][1], bl[nt][1]);
      }
      const float cs0 = cs[8 * ks + tq], cs1 = cs[8 * ks + tq + 4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) {
        if (ks > 2 * mt + 1) continue;  // T[t][s] = 0 for s > t
        // A (row t, k s) = T[t][s] cs[s]: a0 (g, c), a1 (g+8, c), a2 (g, c+4), a3 (g+8, c+4)
        const float* tr = Ts + (16 * mt + gq) * LT + 8 * ks + tq;
        const float ta[4] = {tr[0] * cs0, tr[8 * LT] * cs0, tr[4] * cs1, tr[8 * LT + 4] * cs1};
        uint32_t a[4], al[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split_tf32(ta[i], a[i], al[i]);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
          if (8 * nt < ncol) mma3_tf32(acc[mt][nt], a, al, b[nt][0], b[nt][1], bl[nt][0], bl[nt][1]);
      }
    }
    // d_i at (t = 16mt + g + 8(i >> 1), column xc + 8nt + 2c + (i & 1))
#pragma unroll
    for (int mt = 0; mt < 4; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        if (8 * nt >= ncol) continue;
        const int t = 16 * mt + gq, x = xc + 8 * nt + 2 * tq;
        if (isU) {
          *reinterpret_cast<float2*>(w.U + (rb + t) * Dv + x) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
          *reinterpret_cast<float2*>(w.U + (rb + t + 8) * Dv + x) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
        } else {
          *reinterpret_cast<float2*>(w.W + (rb + t) * DK + x) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
          *reinterpret_cast<float2*>(w.W + (rb + t + 8) * DK + x) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
        }
      }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// k_cscan_tc shared memory: two stages of {W: [C][DK + 16] f32; Qg: [C][DK + 16] fp16; KT: [DK][C + 16] fp16;
// P: [C][C + 16] fp16; U: [C][RB + 8] f32}, then Ms [RB][DK + 16] (f32 copy of M) and Dt [RB][C + 16] (tf32 D^T);
// 216 KiB at DK = 128 (Hopper's opt-in is 227 KiB; prefill_gdn_tc_device_ok checks the device). Row pitches:
// 16-bit rows == 32 mod 128 bytes (8-byte fragment loads: the 4 rows of a half-warp in distinct bank groups),
// f32 rows == 64 mod 128 bytes (16-byte fragment loads: the 2 rows of a quarter-warp), U rows 160 bytes.
template <int DK>
struct CsL {
  static constexpr int LW = DK + 16, LQ = DK + 16, LS = kC + 16, LU = kRB + 8, LM = DK + 16, LD = kC + 16;
  static constexpr size_t W_OFF = 0;
  static constexpr size_t Q_OFF = W_OFF + 4 * size_t(kC) * LW;
  static constexpr size_t KT_OFF = Q_OFF + 2 * size_t(kC) * LQ;
  static constexpr size_t P_OFF = KT_OFF + 2 * size_t(DK) * LS;
  static constexpr size_t U_OFF = P_OFF + 2 * size_t(kC) * LS;
  static constexpr size_t STAGE = U_OFF + 4 * size_t(kC) * LU;
  static constexpr size_t M_OFF = 2 * STAGE;
  static constexpr size_t D_OFF = M_OFF + 4 * size_t(kRB) * LM;
  static constexpr size_t BYTES = D_OFF + 4 * size_t(kRB) * LD;
};

template <int DK>
__global__ void __launch_bounds__(kThreads, 1) k_cscan_tc(const GdnChunkArgs g) {
  using Lay = CsL<DK>;
  constexpr int LW = Lay::LW, LQ = Lay::LQ, LS = Lay::LS, LU = Lay::LU, LM = Lay::LM, LD = Lay::LD;
  constexpr int NTW = DK / 32;  // state update: 8-column n-tiles per warp
  extern __shared__ __align__(16) unsigned char smraw[];
  float* Ms = reinterpret_cast<float*>(smraw + Lay::M_OFF);
  float* Dt = reinterpret_cast<float*>(smraw + Lay::D_OFF);
  const int j = blockIdx.x, v0 = blockIdx.y * kRB;
  const int Hv = g.Hv, Dv = g.Dv, vd = Hv * Dv, nc = (g.n + kC - 1) / kC;
  const int nv = min(kRB, Dv - v0);  // valid value rows (a multiple of 8)
  const int64_t np = int64_t(nc) * kC;
  const TcWs w = tc_ws(g.ws, g.n, Hv, DK, Dv);
  const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, gq = lane >> 2, tq = lane & 3;
  float* S = g.S + (int64_t(j) * Dv + v0) * DK;

  auto issue = [&](int c) {  // chunk c's tiles -> stage c & 1 (one commit group)
    unsigned char* st = smraw + (c & 1) * Lay::STAGE;
    const int64_t rb = int64_t(j) * np + int64_t(c) * kC;
    for (int i = tid; i < kC * DK / 4; i += kThreads) {  // W: f32, 4 per 16-byte piece
      const int t = i / (DK / 4), p = i % (DK / 4);
      cp_async16(st + Lay::W_OFF + 4 * (t * LW + 4 * p), w.W + (rb + t) * DK + 4 * p);
    }
    for (int i = tid; i < kC * DK / 8; i += kThreads) {  // Q eg: fp16, 8 per piece
      const int t = i / (DK / 8), p = i % (DK / 8);
      cp_async16(st + Lay::Q_OFF + 2 * (t * LQ + 8 * p), w.Q + (rb + t) * DK + 8 * p);
    }
    for (int i = tid; i < DK * 8; i += kThreads) {
      const int d = i >> 3, p = i & 7;
      cp_async16(st + Lay::KT_OFF + 2 * (d * LS + 8 * p), w.KT + ((int64_t(j) * nc + c) * DK + d) * kC + 8 * p);
    }
    for (int i = tid; i < kC * 8; i += kThreads) {
      const int t = i >> 3, p = i & 7;
      cp_async16(st + Lay::P_OFF + 2 * (t * LS + 8 * p), w.P + (rb + t) * kC + 8 * p);
      if (4 * p < nv) cp_async16(st + Lay::U_OFF + 4 * (t * LU + 4 * p), w.U + (rb + t) * Dv + v0 + 4 * p);
    }
    cp_commit();
  };
  issue(0);
  if (nv < kRB)  // U columns past Dv: zero once in both stages (never copied into)
    for (int i = tid; i < 2 * kC * kRB; i += kThreads) {
      const int st = i / (kC * kRB), t = (i / kRB) % kC, v = i % kRB;
      if (v >= nv) reinterpret_cast<float*>(smraw + st * Lay::STAGE + Lay::U_OFF)[t * LU + v] = 0.f;
    }
  // State map (phase 2 accumulators): warp w holds rows mv + g (+8) of the slice, columns nd0 + 8nt + 2c (+1).
  const int mv = 16 * (wid & 1), nd0 = (wid >> 1) * (DK / 4);
  float m[NTW][4];
#pragma unroll
  for (int nt = 0; nt < NTW; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = mv + gq + 8 * h, d = nd0 + 8 * nt + 2 * tq;
      float2 x = make_float2(0.f, 0.f);
      if (v < nv) x = *reinterpret_cast<const float2*>(S + int64_t(v) * DK + d);
      m[nt][2 * h] = x.x;
      m[nt][2 * h + 1] = x.y;
      *reinterpret_cast<float2*>(Ms + v * LM + d) = x;
    }
  // Phase 1/2 output map: warp w -> tokens 16mt .. 16mt + 15, value rows 16nh .. 16nh + 15 (two n-tiles).
  const int mt = wid & 3, nh = wid >> 2;
  for (int c = 0; c < nc; ++c) {
    const int c0 = c * kC, L = min(kC, g.n - c0);
    const float eL = w.eL[int64_t(j) * nc + c];
    cp_wait<0>();
    __syncthreads();  // chunk c's tiles and the f32 M of chunk c - 1 visible; stage (c + 1) & 1 free
    if (c + 1 < nc) issue(c + 1);
    const unsigned char* st = smraw + (c & 1) * Lay::STAGE;
    const float* Wt = reinterpret_cast<const float*>(st + Lay::W_OFF);
    const __half* Qt = reinterpret_cast<const __half*>(st + Lay::Q_OFF);
    const __half* KTt = reinterpret_cast<const __half*>(st + Lay::KT_OFF);
    const __half* Pt = reinterpret_cast<const __half*>(st + Lay::P_OFF);
    const float* Ut = reinterpret_cast<const float*>(st + Lay::U_OFF);
    // ---- phase 1: W M^T and (Q eg) M^T over k = d, two accumulator sets (one per k-step of a pair) ----
    float aD[2][2][4], aO[2][2][4];  // [k-step parity][n-tile][i]
#pragma unroll
    for (int p = 0; p < 2; ++p)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) aD[p][nt][i] = aO[p][nt][i] = 0.f;
#pragma unroll 2
    for (int kp = 0; kp < DK / 16; ++kp) {
      const int kc = 16 * kp + 4 * tq;
      // W as hi + lo in the same k map as frag_a_h: r0 = row g, r1 = row g + 8 at columns kc .. kc + 3
      uint32_t aw[2][4], awl[2][4], aq[2][4];
      const float4 r0 = *reinterpret_cast<const float4*>(Wt + (16 * mt + gq) * LW + kc);
      const float4 r1 = *reinterpret_cast<const float4*>(Wt + (16 * mt + gq + 8) * LW + kc);
      split_tf32(r0.x, aw[0][0], awl[0][0]); split_tf32(r1.x, aw[0][1], awl[0][1]);
      split_tf32(r0.y, aw[0][2], awl[0][2]); split_tf32(r1.y, aw[0][3], awl[0][3]);
      split_tf32(r0.z, aw[1][0], awl[1][0]); split_tf32(r1.z, aw[1][1], awl[1][1]);
      split_tf32(r0.w, aw[1][2], awl[1][2]); split_tf32(r1.w, aw[1][3], awl[1][3]);
      frag_a_h(aq, *reinterpret_cast<const uint2*>(Qt + (16 * mt + gq) * LQ + kc),
               *reinterpret_cast<const uint2*>(Qt + (16 * mt + gq + 8) * LQ + kc));
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        // B (k d, col v) = M[v][d], v = 16nh + 8nt + g: k-step 0 b0 = M[v][kc], b1 = M[v][kc + 1]; k-step 1 kc + 2, + 3
        const float4 mb = *reinterpret_cast<const float4*>(Ms + (16 * nh + 8 * nt + gq) * LM + kc);
        uint32_t b0, b1, b2, b3, l0, l1, l2, l3;
        split_tf32(mb.x, b0, l0); split_tf32(mb.y, b1, l1);
        split_tf32(mb.z, b2, l2); split_tf32(mb.w, b3, l3);
        mma3_tf32(aD[0][nt], aw[0], awl[0], b0, b1, l0, l1);
        mma3_tf32(aD[1][nt], aw[1], awl[1], b2, b3, l2, l3);
        mma1688_tf32(aO[0][nt], aq[0], b0, b1);  // (Q eg) M^T with M's tf32 part only
        mma1688_tf32(aO[1][nt], aq[1], b2, b3);
      }
    }
    // D = U - W M^T -> Dt[v][t] (tf32); d_i at (t = 16mt + g + 8(i >> 1), v = 16nh + 8nt + 2c + (i & 1))
    float o[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = 16 * mt + gq + 8 * h, v = 16 * nh + 8 * nt + 2 * tq;
        const float2 u = *reinterpret_cast<const float2*>(Ut + t * LU + v);
        const float d0 = u.x - (aD[0][nt][2 * h] + aD[1][nt][2 * h]);
        const float d1 = u.y - (aD[0][nt][2 * h + 1] + aD[1][nt][2 * h + 1]);
        Dt[v * LD + t] = tf32r(d0);
        Dt[(v + 1) * LD + t] = tf32r(d1);
        o[nt][2 * h] = aO[0][nt][2 * h] + aO[1][nt][2 * h];
        o[nt][2 * h + 1] = aO[0][nt][2 * h + 1] + aO[1][nt][2 * h + 1];
      }
    __syncthreads();  // Dt complete; every read of Ms done
    // ---- phase 2a: O += P D over k = s <= t (k-pairs 0 .. mt) ----
    float o2[2][4] = {};
    for (int kp = 0; kp <= mt; ++kp) {
      const int kc = 16 * kp + 4 * tq;
      uint32_t ap[2][4];
      frag_a_h(ap, *reinterpret_cast<const uint2*>(Pt + (16 * mt + gq) * LS + kc),
               *reinterpret_cast<const uint2*>(Pt + (16 * mt + gq + 8) * LS + kc));
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        // B (k s, col v) = D[s][v] = Dt[v][s], v = 16nh + 8nt + g: b0 = Dt[v][kc], b1 = Dt[v][kc + 1] (k-step 0)
        const float4 db = *reinterpret_cast<const float4*>(Dt + (16 * nh + 8 * nt + gq) * LD + kc);
        mma1688_tf32(o[nt], ap[0], __float_as_uint(db.x), __float_as_uint(db.y));
        mma1688_tf32(o2[nt], ap[1], __float_as_uint(db.z), __float_as_uint(db.w));
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int t = 16 * mt + gq + 8 * h, v = 16 * nh + 8 * nt + 2 * tq;
        if (t < L && v < nv)
          *reinterpret_cast<float2*>(g.obuf + int64_t(c0 + t) * vd + j * Dv + v0 + v) =
              make_float2(o[nt][2 * h] + o2[nt][2 * h], o[nt][2 * h + 1] + o2[nt][2 * h + 1]);
      }
    // ---- phase 2b: M <- eL M + D^T (K ed) over k = s (A = Dt rows, B = KT rows), two accumulator sets ----
    float m2[NTW][4];
#pragma unroll
    for (int nt = 0; nt < NTW; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        m[nt][i] *= eL;
        m2[nt][i] = 0.f;
      }
#pragma unroll
    for (int kp = 0; kp < kC / 16; ++kp) {
      const int kc = 16 * kp + 4 * tq;
      // A (row v, k s) = Dt[v][s]: r0 = row mv + g, r1 = row mv + g + 8 at s = kc .. kc + 3 (same k map as B)
      const float4 r0 = *reinterpret_cast<const float4*>(Dt + (mv + gq) * LD + kc);
      const float4 r1 = *reinterpret_cast<const float4*>(Dt + (mv + gq + 8) * LD + kc);
      const uint32_t a0[4] = {__float_as_uint(r0.x), __float_as_uint(r1.x), __float_as_uint(r0.y),
                              __float_as_uint(r1.y)};
      const uint32_t a1[4] = {__float_as_uint(r0.z), __float_as_uint(r1.z), __float_as_uint(r0.w),
                              __float_as_uint(r1.w)};
#pragma unroll
      for (int nt = 0; nt < NTW; ++nt) {
        // B (k s, col d) = (K ed)[s][d] = KT[d][s], d = nd0 + 8nt + g: k-step 0 b0 = KT[d][kc], b1 = KT[d][kc + 1]
        const uint2 kb = *reinterpret_cast<const uint2*>(KTt + (nd0 + 8 * nt + gq) * LS + kc);
        const float2 k01 = h2f(kb.x), k23 = h2f(kb.y);
        mma1688_tf32(m[nt], a0, __float_as_uint(k01.x), __float_as_uint(k01.y));
        mma1688_tf32(m2[nt], a1, __float_as_uint(k23.x), __float_as_uint(k23.y));
      }
    }
#pragma unroll
    for (int nt = 0; nt < NTW; ++nt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        m[nt][2 * h] += m2[nt][2 * h];
        m[nt][2 * h + 1] += m2[nt][2 * h + 1];
        const int v = mv + gq + 8 * h, d = nd0 + 8 * nt + 2 * tq;
        *reinterpret_cast<float2*>(Ms + v * LM + d) = make_float2(m[nt][2 * h], m[nt][2 * h + 1]);
      }
  }
#pragma unroll
  for (int nt = 0; nt < NTW; ++nt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int v = mv + gq + 8 * h, d = nd0 + 8 * nt + 2 * tq;
      if (v < nv) *reinterpret_cast<float2*>(S + int64_t(v) * DK + d) = make_float2(m[nt][2 * h], m[nt][2 * h + 1]);
    }
}


size_t tc_smem(int Dk) {
  switch (Dk) {
    case 32: return std::max(PrepL<32>::BYTES, CsL<32>::BYTES);
    case 64: return std::max(PrepL<64>::BYTES, CsL<64>::BYTES);
    case 96: return std::max(PrepL<96>::BYTES, CsL<96>::BYTES);
    default: return std::max(PrepL<128>::BYTES, CsL<128>::BYTES);
  }
}

template <int DK>
void launch_tc(const GdnChunkArgs& g, cudaStream_t s) {
  allow_smem(k_prep_tc<DK>, PrepL<DK>::BYTES);
  allow_smem(k_cscan_tc<DK>, CsL<DK>::BYTES);
  k_prep_tc<DK><<<dim3((g.n + kC - 1) / kC, g.Hv), kThreads, PrepL<DK>::BYTES, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
  k_cscan_tc<DK><<<dim3(g.Hv, (g.Dv + kRB - 1) / kRB), kThreads, CsL<DK>::BYTES, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace

size_t prefill_gdn_tc_ws_floats(int n, int Hv, int Dk, int Dv) {
  const size_t nc = size_t((n + kC - 1) / kC), np = nc * kC;
  return size_t(Hv) * (np * size_t(Dk) + np * (2 * size_t(Dk) + kC) / 2 + np * size_t(Dv) + nc);
}

bool prefill_gdn_tc_device_ok(int Dk, int Dv) {
  if (Dk % 32 || Dk < 32 || Dk > 128 || Dv % 8 || Dv < 8 || Dv > kDvMax) return false;
  return tc_smem(Dk) <= size_t(gdn_smem_optin());
}

bool prefill_gdn_tc_supported(const GdnChunkArgs& g) {
  if (!prefill_gdn_tc_device_ok(g.Dk, g.Dv)) return false;
  const auto mis = [](const void* p, uintptr_t a) { return (reinterpret_cast<uintptr_t>(p) & (a - 1)) != 0; };
  return !(mis(g.cbuf, 16) || mis(g.ws, 16) || mis(g.obuf, 8) || mis(g.S, 8));
}

void prefill_gdn_chunked_scan_tc(const GdnChunkArgs& g, cudaStream_t s) {
  switch (g.Dk) {
    case 32: launch_tc<32>(g, s); break;
    case 64: launch_tc<64>(g, s); break;
    case 96: launch_tc<96>(g, s); break;
    default: launch_tc<128>(g, s); break;
  }
}

}  // namespace lily::cuda
