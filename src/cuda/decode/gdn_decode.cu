// Gated DeltaNet decode step (one token, one layer). One block per value head j:
//  1. causal depthwise conv (K taps, ring of raw inputs, slot p % K holds position p) + SiLU for the q/k channels
//     of key head j/(Hv/Hk) and the v channels of head j; the ring slot of this position is written once
//     (q/k channels by the first value head of the group).
//  2. l2-normalise q and k (q also scaled by 1/sqrt(Dk)); beta = sigmoid(b), g = a_neg * softplus(a + dt_bias).
//  3. each warp owns rows v of S_j [Dv][Dk] (fp32, contiguous over Dk): S *= exp(g); u = S k;
//     S += k * beta (v - u); o = S q  (row-parallel, no cross-row dependency).
//  4. gated RMSNorm of o with silu(z).
#include <algorithm>
#include <string>

#include "cuda/common/device_util.cuh"
#include "cuda/common/i16_dot.cuh"

namespace lily::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kMaxD = 256;
constexpr int kMaxK = 8;  // conv taps

template <int NPL>
__device__ __forceinline__ void load_row(const float* p, float (&s)[NPL]) {
  if constexpr (NPL % 4 == 0) {
#pragma unroll
    for (int i = 0; i < NPL; i += 4) {
      const float4 t = *reinterpret_cast<const float4*>(p + i);
      s[i] = t.x; s[i + 1] = t.y; s[i + 2] = t.z; s[i + 3] = t.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < NPL; ++i) s[i] = p[i];
  }
}
template <int NPL>
__device__ __forceinline__ void store_row(float* p, const float (&s)[NPL]) {
  if constexpr (NPL % 4 == 0) {
#pragma unroll
    for (int i = 0; i < NPL; i += 4) *reinterpret_cast<float4*>(p + i) = make_float4(s[i], s[i + 1], s[i + 2], s[i + 3]);
  } else {
#pragma unroll
    for (int i = 0; i < NPL; ++i) p[i] = s[i];
  }
}

// Steps 2-3 of one value head after the conv: the l2-normalised q (also scaled by 1/sqrt(Dk)) and k of this lane's
// NPL dims (from the sums of squares qq, kk of the block's sq, sk), the gates, and the delta rule on one row of S.
template <int NPL>
struct DeltaStep {
  float qr[NPL], kr[NPL], alpha, beta;
  __device__ DeltaStep(const float* sq, const float* sk, float qq, float kk, float bj, float aj, float dt_bias,
                       float a_neg, int lane) {
    const float rq = rsqrtf(qq + 1e-6f) * rsqrtf(float(32 * NPL)), rk = rsqrtf(kk + 1e-6f);
    beta = sigmoid_f(bj);
    const float xa = aj + dt_bias;
    const float sp = xa > 20.f ? xa : log1pf(__expf(xa));
    alpha = __expf(a_neg * sp);
#pragma unroll
    for (int i = 0; i < NPL; ++i) { qr[i] = sq[lane * NPL + i] * rq; kr[i] = sk[lane * NPL + i] * rk; }
  }
  // Row v of S (this lane's NPL entries in s; v_in = v's input): S *= alpha; u = S k; S += k beta (v_in - u);
  // returns o = S q (every lane) after storing the row at Srow.
  __device__ __forceinline__ float row(float (&s)[NPL], float v_in, float* Srow, int lane) const {
    float u = 0.f;
#pragma unroll
    for (int e = 0; e < NPL; ++e) { s[e] *= alpha; u += s[e] * kr[e]; }
    u = warp_sum(u);
    const float d = beta * (v_in - u);
    float o = 0.f;
#pragma unroll
    for (int e = 0; e < NPL; ++e) { s[e] += kr[e] * d; o += s[e] * qr[e]; }
    store_row<NPL>(Srow + lane * NPL, s);
    return warp_sum(o);
  }
};

// One value head j's geometry and its state in the StepCtl (S_j, the layer's conv ring, pos), read by both step
// kernels before their PDL wait: the state was last written by earlier steps, never by the kernel just before.
struct GdnHead {
  int ratio, hk, Dv, K, key_dim, conv_dim, pos;
  float* ring;  // [conv_dim][K] of this layer (conv_ring_at)
  float* S;     // S_j [Dv][Dk]
};
template <int NPL>
__device__ __forceinline__ GdnHead gdn_head(const GdnArgs& g, int j) {
  constexpr int Dk = 32 * NPL;
  GdnHead h;
  h.ratio = g.Hv / g.Hk;
  h.hk = j / h.ratio;
  h.Dv = g.Dv;
  h.K = g.K;
  h.key_dim = g.Hk * Dk;
  h.conv_dim = 2 * h.key_dim + g.Hv * g.Dv;
  const StepCtl& c = *g.ctl;
  h.pos = c.pos;
  h.ring = c.conv + int64_t(g.layer) * h.K * h.conv_dim;
  h.S = c.S + (int64_t(g.layer) * g.Hv + j) * int64_t(g.Dv) * Dk;
  return h;
}

// NPL: Dk = 32 * NPL; RPW: rows of S per warp (Dv <= 32 * RPW with 32 warps).
template <int NPL, int RPW>
__global__ void __launch_bounds__(kThreads) k_gdn(const GdnArgs g) {
  __shared__ float sq[kMaxD], sk[kMaxD], sv[kMaxD], so[kMaxD];
  __shared__ float red[32];
  const int j = blockIdx.x;
  constexpr int Dk = 32 * NPL;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  pdl_trigger();  // out_proj may launch at once (its weight loads overlap this step)
  const bool tr = g.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(g.trace, 0);
  const auto [ratio, hk, Dv, K, key_dim, conv_dim, pos, ring, S] = gdn_head<NPL>(g, j);  // read before the wait
  const bool write_qk = (j % ratio) == 0;
  const int nw = blockDim.x >> 5;
  float s[RPW][NPL];
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int v = warp + i * nw;
    if (v < Dv) load_row<NPL>(S + int64_t(v) * Dk + lane * NPL, s[i]);
  }
  // Conv taps and the ring's earlier inputs (written by earlier steps) and the per-head constants are also
  // loaded before pdl_wait, all in flight at once; only qkv, z, a, b come from the kernel just before.
  const int nconv = 2 * Dk + Dv;
  const int t = threadIdx.x;  // one conv channel per thread (nconv <= blockDim.x, checked on the host)
  int ch = 0;
  if (t < Dk) ch = hk * Dk + t;
  else if (t < 2 * Dk) ch = key_dim + hk * Dk + (t - Dk);
  else ch = 2 * key_dim + j * Dv + (t - 2 * Dk);
  float cw[kMaxK], cr[kMaxK];
#pragma unroll
  for (int tap = 0; tap < kMaxK; ++tap) {
    cw[tap] = 0.f;
    cr[tap] = 0.f;
    if (t < nconv && tap < K) {
      cw[tap] = g.conv_w[int64_t(ch) * K + tap];
      const int p = pos - (K - 1) + tap;
      if (tap < K - 1 && p >= 0) cr[tap] = ring[conv_ring_at(ch, K, p)];
    }
  }
  const float dt_bias = g.dt_bias[j], a_neg = g.a_neg[j];
  const float nrm_w = t < Dv ? g.norm_w[t] : 0.f;
  pdl_wait();
  if (tr) trace_at(g.trace, 1);
  const float xin = t < nconv ? g.qkv[ch] : 0.f;
  const float zt = t < Dv ? g.z[j * Dv + t] : 0.f;
  const float bj = g.b[j], aj = g.a[j];

  // 1. conv + SiLU: channels [0, Dk) = q, [Dk, 2Dk) = k, [2Dk, 2Dk+Dv) = v of this head
  if (t < nconv) {
    float acc = 0.f;
#pragma unroll
    for (int tap = 0; tap < kMaxK; ++tap) {
      if (tap < K - 1) acc += cw[tap] * cr[tap];
      else if (tap == K - 1) acc += cw[tap] * xin;
    }
    if (t >= 2 * Dk || write_qk) ring[conv_ring_at(ch, K, pos)] = xin;
    const float y = silu_f(acc);
    if (t < Dk) sq[t] = y;
    else if (t < 2 * Dk) sk[t - Dk] = y;
    else sv[t - 2 * Dk] = y;
  }
  __syncthreads();
  if (tr) trace_at(g.trace, 7);
  // 2. l2 norms and gates
  // both sums in one pass: warp w < 16 reduces q, the others k (Dk <= 256 elements, 32 warps)
  float qq = 0.f, kk = 0.f;
  {
    const int half = blockDim.x / 2, i = threadIdx.x % half;
    const bool isk = threadIdx.x >= half;
    float acc = 0.f;
    for (int e = i; e < Dk; e += half) acc += isk ? sk[e] * sk[e] : sq[e] * sq[e];
    acc = warp_sum(acc);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    const int hw = nw / 2;
    float a0 = lane < hw ? red[lane] : 0.f, a1 = lane < hw ? red[hw + lane] : 0.f;
    qq = warp_sum(a0);
    kk = warp_sum(a1);
  }
  const DeltaStep<NPL> D(sq, sk, qq, kk, bj, aj, dt_bias, a_neg, lane);
  if (tr) trace_at(g.trace, 8);

  // 3. rows of S (loaded before pdl_wait above)
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int v = warp + i * nw;
    if (v >= Dv) continue;
    const float o = D.row(s[i], sv[v], S + int64_t(v) * Dk, lane);
    if (lane == 0) so[v] = o;
  }
  __syncthreads();
  pdl_trigger();
  if (tr) trace_at(g.trace, 2);
  // 4. gated RMSNorm
  float oo = 0.f;
  for (int i = threadIdx.x; i < Dv; i += blockDim.x) oo += so[i] * so[i];
  oo = block_sum(oo, red);
  const float r = rsqrtf(oo / float(Dv) + g.eps);
  if (t < Dv) g.y[j * Dv + t] = so[t] * r * nrm_w * silu_f(zt);  // Dv <= blockDim.x
  if (g.trace) {  // uniform over the launch
    __syncthreads();
    if (threadIdx.x == 0) trace_max(g.trace, 3);
  }
}

// Split form (GdnArgs::hss set): Dv / 32 blocks of 256 threads per value head j; block (j, p) owns rows
// v in [32p, 32p + 32) of S_j (4 per warp), redoes its key head's conv + l2 norms (2*Dk channels) beside its 32 v
// channels, and writes y = o * norm_w * silu(z) without the RMS factor plus its sum of o^2 to hss[j * P + p]; the
// out_proj GEMV's x prologue (HeadNorm) applies rsqrt(sum_p hss[j * P + p] / Dv + eps). Its blocks fit beside other
// kernels' blocks (a 1024-thread block needs a whole SM) and each reads 16 KB of S instead of 64 KB.
constexpr int kSplitThreads = 256, kSplitRows = 32;

// Row r's copy of one of g's per-row pointers (MR == 1: the pointer itself).
template <int MR, class T>
__device__ __forceinline__ T* row_ptr(const GdnArgs& g, T* p, int r) {
  return MR == 1 ? p : row_at(p, r, g.rows.stride);
}

// Router-from-y's A rows (GdnArgs::ra_*), one row per warp of the blocks past the step's: off the step's critical
// path (their work after the wait, ~1 us, ends before the step's does).
// MR > 1 (GdnArgs::rows): the weight row dotted with each row's ra_x (g.rows.n of them), chunk by chunk so that the
// rows' x loads of a chunk are in flight together; each row's sum in the single-row order.
constexpr int kRaMaxChunks = 8;  // 16-byte chunks (8 columns) per lane: 2048 columns
template <int MR>
__device__ __forceinline__ void ry_a_rows(const GdnArgs& g, int b) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, row = b * (kSplitThreads / 32) + warp;
  const int n = g.ra_cols / 256;
  const bool on = row < g.ra_rows;
  const uint4* src = reinterpret_cast<const uint4*>(g.ra_m + int64_t(row) * g.ra_cols);
  uint4 w[kRaMaxChunks];
  if (on) {
#pragma unroll
    for (int i = 0; i < kRaMaxChunks; ++i)
      if (i < n) w[i] = ldg_weight(src + lane + 32 * i);
  }
  pdl_wait();
  if (!on) return;
  const int nr = MR == 1 ? 1 : g.rows.n;
  float acc[MR];
#pragma unroll
  for (int r = 0; r < MR; ++r) acc[r] = 0.f;
#pragma unroll
  for (int i = 0; i < kRaMaxChunks; ++i) {
    if (i >= n) continue;
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      if (MR > 1 && r >= nr) break;
      const float4* xs = reinterpret_cast<const float4*>(row_ptr<MR>(g, g.ra_x, r)) + (lane + 32 * i) * 2;
      const float4 a = __ldcg(xs), c = __ldcg(xs + 1);
      const float xv[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
      acc[r] = dot8_i16(w[i], xv, acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (MR > 1 && r >= nr) break;
    const float a = warp_sum(acc[r]);
    if (lane == 0) row_ptr<MR>(g, g.ra_out, r)[int64_t(row) * g.ra_stride] = a * g.ra_scale[row];
  }
}

// The pieces of one row's step in the split form, shared by the single-row and the rows forms.
// Step 1's result for the block's channel cc (q, k or v of this head): silu(conv) into sq, sk or sv.
template <int Dk>
__device__ __forceinline__ void split_put_qkv(int cc, float y, float* sq, float* sk, float* sv) {
  if (cc < Dk) sq[cc] = y;
  else if (cc < 2 * Dk) sk[cc - Dk] = y;
  else sv[cc - 2 * Dk] = y;
}
// Step 2's sums of squares of q (warps 0..3) and k (warps 4..7) through red; every thread gets both. Begins after
// the barrier that published sq, sk; ends after its own (red is free again after the next barrier).
template <int Dk>
__device__ __forceinline__ void split_qk_sums(const float* sq, const float* sk, float* red, int t, int lane, int warp,
                                              float& qq, float& kk) {
  {
    const int half = kSplitThreads / 2, i = t % half;
    const bool isk = t >= half;
    float acc = 0.f;
    for (int e = i; e < Dk; e += half) acc += isk ? sk[e] * sk[e] : sq[e] * sq[e];
    acc = warp_sum(acc);
    if (lane == 0) red[warp] = acc;
  }
  __syncthreads();
  qq = 0.f;
  kk = 0.f;
#pragma unroll
  for (int w = 0; w < kSplitThreads / 64; ++w) {
    qq += red[w];
    kk += red[kSplitThreads / 64 + w];
  }
}
// Step 3 on the block's rows v0 + warp + 8i of S_j (s: this lane's entries, updated in place), each stored to
// Sj + v * Dk (S_j in the state or in a snapshot); o of row v into so[v - v0].
template <int NPL, int RPW>
__device__ __forceinline__ void split_s_rows(const DeltaStep<NPL>& D, float (&s)[RPW][NPL], const float* sv,
                                             float* so, float* Sj, int v0, int warp, int lane) {
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int r = warp + 8 * i;
    const float o = D.row(s[i], sv[r], Sj + int64_t(v0 + r) * (32 * NPL), lane);
    if (lane == 0) so[r] = o;
  }
}
// Step 4 of row r, warp 0 (kSplitRows == 32: one row per lane): y = o * norm_w * silu(z) without the RMS factor (or
// its XQ chunk), and the block's sum of o^2 to hss[j * P + part].
template <int MR>
__device__ __forceinline__ void split_out(const GdnArgs& g, int r, const float* so, float nrm_w, float zt, int j,
                                          int Dv, int v0, int P, int part, int lane) {
  const float o = so[lane];
  const float yv = o * nrm_w * silu_f(zt);
  if (g.yq) xq_put_chunk(row_ptr<MR>(g, g.yq, r), g.Hv * Dv, (j * Dv + v0) / 32, yv, lane);
  else row_ptr<MR>(g, g.y, r)[j * Dv + v0 + lane] = yv;
  const float ss = warp_sum(o * o);
  if (lane == 0) row_ptr<MR>(g, g.hss, r)[j * P + part] = ss;
}

// Rows form: the conv inputs of the block's channels by position, win[q - pos + K - 1][cc] holding position q's
// input of channel cc (q from pos - K + 1): first the ring's slots as read before the wait (raw, also for q < 0:
// the conv zeroes those, the rings written back keep them as they were), then the rows' inputs. Each thread reads
// and writes only its own channels' columns (no barrier).
template <int Dk>
using SplitWin = float[kMaxK - 1 + kMaxRows][2 * Dk + kSplitRows];
// Channel ch's ring as it stands after position pos + r (the slots of positions pos + r - K + 1 .. pos + r, from
// win's column cc) into dst (a layer's ring, conv_ring_at): what steps up to that position leave there.
template <int Dk>
__device__ __forceinline__ void split_put_ring(float* dst, int ch, int K, int pos, int r, const SplitWin<Dk>& win,
                                               int cc) {
  if (K == 4 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0) {  // the model's 4 slots as one 16-byte store
    float v[4];
#pragma unroll
    for (int sl = 0; sl < 4; ++sl) v[sl] = win[3 + r - ((pos + r - sl) & 3)][cc];  // the latest position in slot sl
    reinterpret_cast<float4*>(dst)[ch] = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
#pragma unroll
  for (int k = 0; k < kMaxK; ++k)  // position pos + r - k (+ K: the same slot, never negative)
    if (k < K) dst[conv_ring_at(ch, K, pos + r - k + K)] = win[K - 1 + r - k][cc];
}
// Snapshot slot i of the rows form (i < g.rows.n - 1), picked without indexing the parameter array at run time.
__device__ __forceinline__ float* split_snap(const GdnArgs& g, int i) {
  float* p = nullptr;
#pragma unroll
  for (int k = 0; k < kMaxRows - 1; ++k)
    if (k == i) p = g.snap[k];
  return p;
}

// MR: 1 (one position), or kMaxRows for the rows form (GdnArgs::rows, g.rows.n positions pos .. pos + n - 1): the
// block runs steps 1-4 for each row in turn, its rows of S carried in registers and the conv inputs in SplitWin;
// after row i < n - 1 its part of the state (rows of S, the rings of the channels it writes) goes to snapshot
// g.snap[i], after the last to the state. Each row's arithmetic is the single-row form's, in the same order.
template <int NPL, int MR>
__global__ void __launch_bounds__(kSplitThreads) k_gdn_split(const GdnArgs g) {
  constexpr bool kRows = MR > 1;
  if (const int nb = g.Hv * (g.Dv / kSplitRows); int(blockIdx.x) >= nb) {  // router-from-y's A blocks
    pdl_trigger();
    ry_a_rows<MR>(g, blockIdx.x - nb);
    return;
  }
  constexpr int RPW = kSplitRows / (kSplitThreads / 32);
  __shared__ float sq[kMaxD], sk[kMaxD], sv[kSplitRows], so[kSplitRows];
  __shared__ float red[kSplitThreads / 32];
  const int P = g.Dv / kSplitRows;
  const int j = blockIdx.x / P, part = blockIdx.x % P, v0 = part * kSplitRows;
  constexpr int Dk = 32 * NPL;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = threadIdx.x;
  pdl_trigger();
  const bool tr = !kRows && g.trace && threadIdx.x == 0 && blockIdx.x == 0;  // no trace in the rows form
  if (tr) trace_at(g.trace, 0);

  // before the wait, as k_gdn: this block's rows of S, conv taps and ring inputs, per-head constants
  const auto [ratio, hk, Dv, K, key_dim, conv_dim, pos, ring, S] = gdn_head<NPL>(g, j);
  if (tr && pos >= 0 && ring && S) trace_at(g.trace, 29);  // the StepCtl read done
  float s[RPW][NPL];
#pragma unroll
  for (int i = 0; i < RPW; ++i) load_row<NPL>(S + int64_t(v0 + warp + 8 * i) * Dk + lane * NPL, s[i]);
  // channels t and t + 256 of this block: [0, Dk) q, [Dk, 2Dk) k of key head hk, [2Dk, 2Dk + 32) its v rows
  const int nconv = 2 * Dk + kSplitRows;
  int ch[2];
  // cr[h][tap]: the input of position pos - K + 1 + tap (tap < K - 1) from the ring; 0 before position 0, except in
  // the rows form, which keeps the slot's raw value for the rings it writes back (SplitWin)
  float cw[2][kMaxK], cr[2][kMaxK];
  // the model's 4 taps, and a channel's 4 ring slots, as one 16-byte load each (fewer load instructions to issue
  // beside in_proj's and out_proj's row requests)
  const bool tap_vec = K == 4 && ((reinterpret_cast<uintptr_t>(g.conv_w) |
                                                 reinterpret_cast<uintptr_t>(ring)) & 15) == 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int cc = t + h * kSplitThreads;
    ch[h] = cc < Dk       ? hk * Dk + cc
            : cc < 2 * Dk ? key_dim + hk * Dk + (cc - Dk)
                          : 2 * key_dim + j * Dv + v0 + (cc - 2 * Dk);
#pragma unroll
    for (int tap = 0; tap < kMaxK; ++tap) cw[h][tap] = cr[h][tap] = 0.f;
    if (cc >= nconv) continue;
    if (tap_vec) {
      const float4 w4 = __ldg(reinterpret_cast<const float4*>(g.conv_w) + ch[h]);
      const float4 r4 = *(reinterpret_cast<const float4*>(ring) + ch[h]);  // slot p % 4 holds position p
      cw[h][0] = w4.x; cw[h][1] = w4.y; cw[h][2] = w4.z; cw[h][3] = w4.w;
#pragma unroll
      for (int tap = 0; tap < 3; ++tap) {
        const int p = pos - 3 + tap, sl = p & 3;
        const float r = sl == 0 ? r4.x : sl == 1 ? r4.y : sl == 2 ? r4.z : r4.w;
        cr[h][tap] = kRows || p >= 0 ? r : 0.f;
      }
      continue;
    }
#pragma unroll
    for (int tap = 0; tap < kMaxK; ++tap) {
      if (tap < K) {
        cw[h][tap] = g.conv_w[int64_t(ch[h]) * K + tap];
        const int p = pos - (K - 1) + tap;  // rows: p + K, the same slot, as p may be negative
        if (tap < K - 1 && (kRows || p >= 0)) cr[h][tap] = ring[conv_ring_at(ch[h], K, kRows ? p + K : p)];
      }
    }
  }
  if (tr) trace_at(g.trace, 30);  // S, conv tap and ring loads issued
  const float dt_bias = g.dt_bias[j], a_neg = g.a_neg[j];
  const float nrm_w = t < kSplitRows ? g.norm_w[v0 + t] : 0.f;
  if (tr) trace_at(g.trace, 12);
  pdl_wait();
  if (tr) trace_at(g.trace, 1);

  if constexpr (kRows) {
    // the rows' inputs, all loads in flight at once: this thread's channels into win, z of its row (warp 0) into
    // zr, the gates' inputs into br, ar (read after the first row's conv barrier)
    __shared__ SplitWin<Dk> win;
    __shared__ float zr[kMaxRows][kSplitRows], br[kMaxRows], ar[kMaxRows];
    const int n = g.rows.n;
    const int64_t stride = g.rows.stride;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int cc = t + h * kSplitThreads;
      if (cc >= nconv) continue;
      float x[kMaxRows];
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) x[r] = r < n ? row_at(g.qkv, r, stride)[ch[h]] : 0.f;
#pragma unroll
      for (int tap = 0; tap < kMaxK - 1; ++tap)
        if (tap < K - 1) win[tap][cc] = cr[h][tap];
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r)
        if (r < n) win[K - 1 + r][cc] = x[r];
    }
    if (t < kSplitRows) {
      float z[kMaxRows];
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) z[r] = r < n ? row_at(g.z, r, stride)[j * Dv + v0 + t] : 0.f;
#pragma unroll
      for (int r = 0; r < kMaxRows; ++r) zr[r][t] = z[r];
    }
    if (t < n) {
      br[t] = row_at(g.b, t, stride)[j];
      ar[t] = row_at(g.a, t, stride)[j];
    }
    const bool write_qk = (j % ratio) == 0 && part == 0;
    const int64_t s_off = (int64_t(g.layer) * g.Hv + j) * int64_t(Dv) * Dk;  // S_j in the state and the snapshots
    const int64_t ring_off = int64_t(g.layer) * K * conv_dim;
    // The ring's q/k slots are read by every block of the key head's group before its wait and written back (after
    // the last row) by one of them: that block first waits until the others have counted their reads.
    unsigned int* const qk_read = g.qk_read + hk;
    const unsigned int readers = unsigned(ratio * P - 1);
    for (int r = 0; r < n; ++r) {
      float* const snap = r + 1 < n ? split_snap(g, r) : nullptr;  // the state after this row: snapshot, or null
      if (r == n - 1 && write_qk) {  // block-uniform
        if (t == 0) {
          while (*reinterpret_cast<volatile unsigned int*>(qk_read) < readers) __nanosleep(64);
          atomicExch(qk_read, 0u);  // for the next launch
        }
        __syncthreads();
      }
      // 1. conv + SiLU over positions pos + r - K + 1 .. pos + r; the ring as it stands after this row (the
      // channels this block writes, as in the single-row form)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int cc = t + h * kSplitThreads;
        if (cc >= nconv) continue;
        float acc = 0.f;
#pragma unroll
        for (int tap = 0; tap < kMaxK; ++tap)
          if (tap < K) acc += cw[h][tap] * (pos + r - (K - 1) + tap >= 0 ? win[r + tap][cc] : 0.f);
        if (cc >= 2 * Dk || write_qk)
          split_put_ring<Dk>(snap ? snap + g.snap_conv + ring_off : ring, ch[h], K, pos, r, win, cc);
        split_put_qkv<Dk>(cc, silu_f(acc), sq, sk, sv);
      }
      __syncthreads();
      if (r == 0 && !write_qk && t == 0) atomicAdd(qk_read, 1u);  // every thread's ring loads have landed (in win)
      // 2. l2 norms and gates
      float qq, kk;
      split_qk_sums<Dk>(sq, sk, red, t, lane, warp, qq, kk);
      const DeltaStep<NPL> D(sq, sk, qq, kk, br[r], ar[r], dt_bias, a_neg, lane);
      // 3. this block's rows of S
      split_s_rows(D, s, sv, so, snap ? snap + s_off : S, v0, warp, lane);
      __syncthreads();  // so complete; sq, sk, sv, red free for the next row
      // 4. the gated norm's own part of this row
      if (warp == 0) split_out<MR>(g, r, so, nrm_w, zr[r][lane], j, Dv, v0, P, part, lane);
    }
  } else {
    float xin[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) xin[h] = t + h * kSplitThreads < nconv ? g.qkv[ch[h]] : 0.f;
    const float zt = t < kSplitRows ? g.z[j * Dv + v0 + t] : 0.f;
    const float bj = g.b[j], aj = g.a[j];

    // 1. conv + SiLU; the ring slot of this position: q/k channels by part 0 of the group's first value head
    const bool write_qk = (j % ratio) == 0 && part == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int cc = t + h * kSplitThreads;
      if (cc >= nconv) continue;
      float acc = 0.f;
#pragma unroll
      for (int tap = 0; tap < kMaxK; ++tap) {
        if (tap < K - 1) acc += cw[h][tap] * cr[h][tap];
        else if (tap == K - 1) acc += cw[h][tap] * xin[h];
      }
      if (cc >= 2 * Dk || write_qk) ring[conv_ring_at(ch[h], K, pos)] = xin[h];
      split_put_qkv<Dk>(cc, silu_f(acc), sq, sk, sv);
    }
    __syncthreads();
    if (tr) trace_at(g.trace, 7);
    // 2. l2 norms and gates
    float qq, kk;
    split_qk_sums<Dk>(sq, sk, red, t, lane, warp, qq, kk);
    const DeltaStep<NPL> D(sq, sk, qq, kk, bj, aj, dt_bias, a_neg, lane);
    if (tr) trace_at(g.trace, 8);

    // 3. this block's rows of S
    split_s_rows(D, s, sv, so, S, v0, warp, lane);
    __syncthreads();
    pdl_trigger();
    if (tr) trace_at(g.trace, 2);
    // 4. the gated norm's own part: y without the RMS factor (or its XQ chunk), and this block's sum of o^2
    if (warp == 0) split_out<MR>(g, 0, so, nrm_w, zt, j, Dv, v0, P, part, lane);
    if (g.trace) {  // uniform over the launch
      __syncthreads();
      if (threadIdx.x == 0) trace_max(g.trace, 3);
    }
  }
}

}  // namespace

int gdn_split_parts(int Dv) { return Dv % kSplitRows || Dv / kSplitRows > kHeadNormMaxParts ? 0 : Dv / kSplitRows; }

void gdn_decode(const GdnArgs& args, cudaStream_t s, bool pdl) {
  GdnArgs g = args;
  if (g.Dk > kMaxD || g.Dv > kMaxD || g.Dk % 32 || g.Hv % g.Hk || g.K < 1)
    throw Error("gdn_decode: unsupported head sizes (Dk, Dv <= 256, Dk % 32 == 0, Hv % Hk == 0)");
  if (g.yq && !g.hss) throw Error("gdn_decode: the XQ image output (yq) needs the split form");
  if (g.ra_rows > 0 && !g.hss) throw Error("gdn_decode: router-from-y A rows (ra_rows) need the split form");
  if (g.rows.n < 1) throw Error("gdn_decode: rows.n < 1");
  if (g.rows.n > 1 && !g.hss) throw Error("gdn_decode: rows (n > 1) need the split form (hss)");
  if (g.hss) {  // split form
    if (gdn_split_parts(g.Dv) == 0)
      throw Error("gdn_decode: split form needs Dv % 32 == 0 and Dv <= 256");
    if (g.Dk > 128) throw Error("gdn_decode: split form needs Dk <= 128");
    if (g.K > kMaxK) throw Error("gdn_decode: conv kernel > 8");
    if (g.ra_rows > 0 && (!g.ra_m || !g.ra_scale || !g.ra_x || !g.ra_out || g.ra_cols % 256 || g.ra_cols < 256 ||
                          g.ra_cols > 256 * kRaMaxChunks || (reinterpret_cast<uintptr_t>(g.ra_m) & 15) ||
                          (reinterpret_cast<uintptr_t>(g.ra_x) & 15)))
      throw Error("gdn_decode: router-from-y A rows need int16 rows and x (16-byte aligned) of 256k <= 2048 columns");
    if (g.rows.n > 1) {
      if (g.rows.n > kMaxRows) throw Error("gdn_decode: " + std::to_string(g.rows.n) + " rows (at most " +
                                           std::to_string(kMaxRows) + ")");
      if (g.trace) throw Error("gdn_decode: no trace with rows (n > 1)");
      if (g.rows.stride % (g.ra_rows > 0 ? 16 : 4))
        throw Error("gdn_decode: rows need a stride of whole floats (16 bytes with router-from-y A rows)");
      if (!g.qk_read) throw Error("gdn_decode: rows need the q/k ring read counters (qk_read)");
      for (int i = 0; i < g.rows.n - 1; ++i)
        if (!g.snap[i] || (reinterpret_cast<uintptr_t>(g.snap[i]) & 15))
          throw Error("gdn_decode: rows need snapshot slot " + std::to_string(i) + " (16-byte aligned)");
    }
    const int ra_blocks = (std::max(g.ra_rows, 0) + kSplitThreads / 32 - 1) / (kSplitThreads / 32);
    const dim3 grid(g.Hv * (g.Dv / kSplitRows) + ra_blocks);
    const auto run = [&](auto one, auto rows) {  // the single-row or the rows instantiation of one NPL
      if (g.rows.n > 1) launch(rows, grid, dim3(kSplitThreads), 0, s, pdl, g);
      else launch(one, grid, dim3(kSplitThreads), 0, s, pdl, g);
    };
    switch (g.Dk / 32) {
      case 1: run(k_gdn_split<1, 1>, k_gdn_split<1, kMaxRows>); break;
      case 2: run(k_gdn_split<2, 1>, k_gdn_split<2, kMaxRows>); break;
      case 4: run(k_gdn_split<4, 1>, k_gdn_split<4, kMaxRows>); break;
      default: throw Error("gdn_decode: Dk must be 32, 64 or 128");
    }
    return;
  }
  if (g.Dv > 32 * 4) throw Error("gdn_decode: Dv > 128 not instantiated");
  if (g.K > kMaxK || 2 * g.Dk + g.Dv > kThreads) throw Error("gdn_decode: conv kernel > 8 or 2*Dk + Dv > 1024");
  switch (g.Dk / 32) {
    case 1: launch(k_gdn<1, 4>, dim3(g.Hv), dim3(kThreads), 0, s, pdl, g); break;
    case 2: launch(k_gdn<2, 4>, dim3(g.Hv), dim3(kThreads), 0, s, pdl, g); break;
    case 4: launch(k_gdn<4, 4>, dim3(g.Hv), dim3(kThreads), 0, s, pdl, g); break;
    default: throw Error("gdn_decode: Dk must be 32, 64 or 128");
  }
}

}  // namespace lily::cuda
