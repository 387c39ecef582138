// Gated DeltaNet over a chunk of n tokens (same state layout as gdn_decode.cu, so decode continues from it):
//  k_conv: causal depthwise conv + SiLU per (token tile, channel group of one head); the K-1 inputs before the
//    chunk come from the conv ring (slot p % K holds position p); q/k heads l2-normalised (q also * 1/sqrt(Dk)).
//  k_ring: writes the chunk's last K-1 raw inputs into the ring (after k_conv has read the old ones).
//  k_scan: the gated delta rule as a sequential scan. Grid (Hv, Dv / rows-per-block): the rows of S_j are
//    independent, so each block keeps its rows of the fp32 state in registers for the whole chunk (each warp owns
//    RPW rows, lane holds Dk/32 columns) and walks the tokens, staged 32 at a time in shared memory.
//    k_scan_wide (the default): the token staging double-buffered by cp.async and a row of S over 8 lanes instead
//    of 32 (one 3-level butterfly per token reduces 4 rows). k_scan is the reference (GdnChunkArgs::scan) and the
//    fallback where the cp.async staging does not apply (q/k rows not 16-byte aligned).
//  k_norm: gated RMSNorm per (token, head) -> bf16 input of out_proj.
// Chunked path (g.chunked): prefill_gdn_chunked.cu.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kConvTT = 16;  // tokens per k_conv block

__global__ void k_conv(const GdnChunkArgs g) {
  __shared__ float red[32];
  const int Hk = g.Hk, Dk = g.Dk, Dv = g.Dv, K = g.K;
  const int key_dim = Hk * Dk, cd = 2 * key_dim + g.Hv * Dv;
  const int gi = blockIdx.y;
  int ch0, D;
  float scale = 0.f;  // 0: no l2 norm (v)
  if (gi < Hk) { ch0 = gi * Dk; D = Dk; scale = rsqrtf(float(Dk)); }
  else if (gi < 2 * Hk) { ch0 = key_dim + (gi - Hk) * Dk; D = Dk; scale = 1.f; }
  else { ch0 = 2 * key_dim + (gi - 2 * Hk) * Dv; D = Dv; }
  const int c = threadIdx.x;
  const int ch = ch0 + c;
  const bool on = c < D;
  const int t0 = blockIdx.x * kConvTT, t1 = min(g.n, t0 + kConvTT);
  for (int t = t0; t < t1; ++t) {
    float y = 0.f;
    if (on) {
      const float* w = g.conv_w + int64_t(ch) * K;
      float acc = w[K - 1] * g.proj[int64_t(t) * g.ldp + ch];
      for (int tap = 0; tap < K - 1; ++tap) {
        const int p = t - (K - 1) + tap;  // chunk-relative
        float xin = 0.f;
        if (p >= 0) xin = g.proj[int64_t(p) * g.ldp + ch];
        else if (g.pos0 + p >= 0) xin = g.ring[conv_ring_at(ch, K, g.pos0 + p)];
        acc += w[tap] * xin;
      }
      y = silu_f(acc);
    }
    if (scale != 0.f) {  // uniform per block
      const float ss = block_sum(on ? y * y : 0.f, red);
      y *= rsqrtf(ss + 1e-6f) * scale;
    }
    if (on) g.cbuf[int64_t(t) * cd + ch] = y;
  }
}

__global__ void k_ring(const GdnChunkArgs g) {
  const int cd = 2 * g.Hk * g.Dk + g.Hv * g.Dv;
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= cd) return;
  for (int t = max(0, g.n - (g.K - 1)); t < g.n; ++t) {
    const int p = g.pos0 + t;
    g.ring[conv_ring_at(ch, g.K, p)] = g.proj[int64_t(t) * g.ldp + ch];
  }
}

constexpr int kScanWarps = 8, kTS = 32;

// The block's rows of S [Dv][Dk] (warp w: rows v0 + RPW w + i, lane: NPL consecutive columns) loaded into s
// (zeros past Dv) or, with STORE, written back (k_scan).
template <int NPL, int RPW, bool STORE>
__device__ __forceinline__ void scan_rows_io(float (&s)[RPW][NPL], float* S, int v0, int Dv, int warp, int lane) {
  constexpr int Dk = 32 * NPL;
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int v = v0 + warp * RPW + i;
#pragma unroll
    for (int e = 0; e < NPL; ++e) {
      if constexpr (STORE) {
        if (v < Dv) S[int64_t(v) * Dk + lane * NPL + e] = s[i][e];
      } else {
        s[i][e] = v < Dv ? S[int64_t(v) * Dk + lane * NPL + e] : 0.f;
      }
    }
  }
}

// One token of the delta rule on this warp's RPW rows: S <- alpha S, d = beta (v - S k), S += k d, o = S q;
// vrow / orow: the token's v values and outputs over the block's rows (lane 0 writes orow).
template <int NPL, int RPW>
__device__ __forceinline__ void scan_token(float (&s)[RPW][NPL], const float (&kr)[NPL], const float (&qr)[NPL],
                                           float alpha, float beta, const float* vrow, float* orow, int warp,
                                           int lane) {
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    float u = 0.f;
#pragma unroll
    for (int e = 0; e < NPL; ++e) { s[i][e] *= alpha; u = fmaf(s[i][e], kr[e], u); }
    u = warp_sum(u);
    const float d = beta * (vrow[warp * RPW + i] - u);
    float o = 0.f;
#pragma unroll
    for (int e = 0; e < NPL; ++e) { s[i][e] = fmaf(kr[e], d, s[i][e]); o = fmaf(s[i][e], qr[e], o); }
    o = warp_sum(o);
    if (lane == 0) orow[warp * RPW + i] = o;
  }
}

template <int NPL, int RPW>
__global__ void __launch_bounds__(kScanWarps * 32) k_scan(const GdnChunkArgs g) {
  constexpr int Dk = 32 * NPL, RB = kScanWarps * RPW;
  __shared__ float qs[kTS][Dk], ks[kTS][Dk], vs[kTS][RB], os[kTS][RB];
  __shared__ float s_beta[kTS], s_alpha[kTS];
  const int j = blockIdx.x, v0 = blockIdx.y * RB;
  const int Hv = g.Hv, Dv = g.Dv, ratio = Hv / g.Hk, hk = j / ratio;
  const int key_dim = g.Hk * Dk, cd = 2 * key_dim + Hv * Dv, vd = Hv * Dv;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* S = g.S + int64_t(j) * Dv * Dk;
  float s[RPW][NPL];
  scan_rows_io<NPL, RPW, false>(s, S, v0, Dv, warp, lane);
  const float dtb = g.dt_bias[j], an = g.a_neg[j];
  for (int t0 = 0; t0 < g.n; t0 += kTS) {
    const int nt = min(kTS, g.n - t0);
    __syncthreads();
    for (int i = threadIdx.x; i < nt * Dk; i += blockDim.x) {
      const int t = i / Dk, d = i % Dk;
      const float* row = g.cbuf + int64_t(t0 + t) * cd;
      qs[t][d] = row[hk * Dk + d];
      ks[t][d] = row[key_dim + hk * Dk + d];
    }
    for (int i = threadIdx.x; i < nt * RB; i += blockDim.x) {
      const int t = i / RB, r = i % RB;
      vs[t][r] = v0 + r < Dv ? g.cbuf[int64_t(t0 + t) * cd + 2 * key_dim + j * Dv + v0 + r] : 0.f;
    }
    if (threadIdx.x < nt) {
      const float* pr = g.proj + int64_t(t0 + threadIdx.x) * g.ldp + cd + vd;
      s_beta[threadIdx.x] = sigmoid_f(pr[j]);
      const float xa = pr[Hv + j] + dtb;
      const float sp = xa > 20.f ? xa : log1pf(__expf(xa));
      s_alpha[threadIdx.x] = __expf(an * sp);
    }
    __syncthreads();
    for (int t = 0; t < nt; ++t) {
      float kr[NPL], qr[NPL];
#pragma unroll
      for (int e = 0; e < NPL; ++e) { kr[e] = ks[t][lane * NPL + e]; qr[e] = qs[t][lane * NPL + e]; }
      const float alpha = s_alpha[t], beta = s_beta[t];
      scan_token<NPL, RPW>(s, kr, qr, alpha, beta, vs[t], os[t], warp, lane);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * RB; i += blockDim.x) {
      const int t = i / RB, r = i % RB;
      if (v0 + r < Dv) g.obuf[int64_t(t0 + t) * vd + j * Dv + v0 + r] = os[t][r];
    }
  }
  scan_rows_io<NPL, RPW, true>(s, S, v0, Dv, warp, lane);
}

// k_scan_wide's double buffer: batch b+1's q, k, v and raw gates are copied into shared memory by cp.async while
// batch b is computed (k_scan stages with plain loads between barriers, one round trip per strided loop iteration,
// and waits for them: ~half of its time).
__device__ __forceinline__ void cp_async4(void* smem, const void* gp) {
  const unsigned sa = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(sa), "l"(gp) : "memory");
}

template <int NPL>
constexpr size_t scan_pipe_smem(int RB) {
  return size_t(2 * kTS * (2 * 32 * NPL + RB + 2)) * 4;  // [2 buffers][kTS] x (q, k, v slice, raw b and a)
}

// The double buffer of the cp.async scans (dynamic shared memory, scan_pipe_smem bytes), per buffer b < 2 and
// token t < kTS of the batch: q [b][t][Dk], k [b][t][Dk], the block's v slice [b][t][RB], raw (b, a) [b][t][2].
struct ScanBufs {
  float *q, *k, *v, *ba;
};
__device__ __forceinline__ ScanBufs scan_bufs(float* base, int Dk, int RB) {
  ScanBufs b;
  b.q = base;
  b.k = b.q + 2 * kTS * Dk;
  b.v = b.k + 2 * kTS * Dk;
  b.ba = b.v + 2 * kTS * RB;
  return b;
}

// Starts copying tokens [t0, t0 + min(kTS, n - t0)) of value head j (key head hk) into buffer buf, one commit
// group: q and k rows by 16-byte cp.async (needs 16-byte aligned cbuf rows: prefill_gdn_scan_kernel checks),
// rows v0 .. v0 + RB - 1 of v by 4-byte copies (rows past Dv zero-filled), raw b and a. All threads of the block.
template <int Dk>
__device__ __forceinline__ void stage_scan_batch(const GdnChunkArgs& g, const ScanBufs& sb, int buf, int t0, int RB,
                                                 int j, int hk, int v0) {
  const int key_dim = g.Hk * Dk, cd = 2 * key_dim + g.Hv * g.Dv, vd = g.Hv * g.Dv;
  const int nt = min(kTS, g.n - t0);
  for (int i = threadIdx.x; i < nt * (Dk / 4); i += blockDim.x) {
    const int t = i / (Dk / 4), c = (i % (Dk / 4)) * 4;
    const float* row = g.cbuf + int64_t(t0 + t) * cd;
    cp_async16(sb.q + (buf * kTS + t) * Dk + c, row + hk * Dk + c);
    cp_async16(sb.k + (buf * kTS + t) * Dk + c, row + key_dim + hk * Dk + c);
  }
  for (int i = threadIdx.x; i < nt * RB; i += blockDim.x) {
    const int t = i / RB, r = i % RB;
    float* dst = sb.v + (buf * kTS + t) * RB + r;
    if (v0 + r < g.Dv) cp_async4(dst, g.cbuf + int64_t(t0 + t) * cd + 2 * key_dim + j * g.Dv + v0 + r);
    else *dst = 0.f;
  }
  if (int(threadIdx.x) < nt) {
    const float* pr = g.proj + int64_t(t0 + threadIdx.x) * g.ldp + cd + vd;
    cp_async4(sb.ba + (buf * kTS + threadIdx.x) * 2, pr + j);
    cp_async4(sb.ba + (buf * kTS + threadIdx.x) * 2 + 1, pr + g.Hv + j);
  }
  cp_async_commit();
}

// (alpha, beta) of one token from its raw gates: alpha = exp(a_neg * softplus(a + dt_bias)), beta = sigmoid(b)
__device__ __forceinline__ float2 scan_gates(const float* raw_ba, float dtb, float an) {
  const float xa = raw_ba[1] + dtb;
  const float sp = xa > 20.f ? xa : log1pf(__expf(xa));
  return make_float2(__expf(an * sp), sigmoid_f(raw_ba[0]));
}

// ---- k_scan_wide: the pipelined scan with 8 lanes per row of S ----
// A row of S over the 32 lanes of a warp (k_scan, and the pipelined form measured before this one) costs two 5-level
// warp reductions (u = S.k and o = S.q) per token and row: shuffles, not arithmetic, bound it. Here a row is split over kWideL = 8 lanes
// (Dk / 8 columns each): the 4 rows a warp holds side by side are reduced together by one 3-level butterfly, and
// each lane keeps RPL rows, whose u and o share the k and q it reads from shared memory. Thread map (warp w of
// the block, lane = 4 c + gr):
//   gr = lane & 3:  row slot; the lane's rows (block-relative) are rw + 4 i, rw = 4 RPL w + gr, i < RPL;
//   c  = lane >> 2: column slice 0..7; the lane's columns are 32 m + 4 c + {0..3}, m < NPL (one float4 per m:
//                   the 8 slices of a 32-column chunk are 128 contiguous bytes, the 4 row slots read the same
//                   addresses, so a k or q float4 load is conflict-free and broadcast);
//   the lanes of one row (equal gr) are reduced by __shfl_xor 4, 8, 16.
// Per element the arithmetic is k_scan's (s *= alpha, u += s k, s += k d, o += s q, all fmaf); the per-lane
// sums are split in 4 chains (by column & 3) and the butterfly adds in another order than warp_sum.
// o of token t is reduced in the same butterfly as u of token t + 1 (the output is off the recurrence's path)
// and stored to obuf directly by the c == 0 lanes.
constexpr int kWideL = 8, kWideSlots = 32 / kWideL;  // lanes per row; rows side by side in a warp

// x[i] <- the sum of x[i] over the 8 lanes of this lane's row slot (all 8 get the sum)
template <int N>
__device__ __forceinline__ void slot_sum(float (&x)[N]) {
#pragma unroll
  for (int off = kWideSlots; off < 32; off <<= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) x[i] += __shfl_xor_sync(0xffffffffu, x[i], off);
}

// dst[4 m + e] = src[32 m + e], e < 4, m < NPL (src: this lane's first column, 16-byte aligned shared memory)
template <int NPL>
__device__ __forceinline__ void load_slice(float (&dst)[4 * NPL], const float* src) {
#pragma unroll
  for (int m = 0; m < NPL; ++m) {
    const float4 x = *reinterpret_cast<const float4*>(src + 32 * m);
    dst[4 * m] = x.x; dst[4 * m + 1] = x.y; dst[4 * m + 2] = x.z; dst[4 * m + 3] = x.w;
  }
}

// the 4 partial sums of a lane's slice (fma chains over columns with equal index & 3), added pairwise
__device__ __forceinline__ float sum4(const float (&a)[4]) { return (a[0] + a[1]) + (a[2] + a[3]); }

template <int NPL, int RPL, int WARPS>
__global__ void __launch_bounds__(WARPS * 32) k_scan_wide(const GdnChunkArgs g) {
  constexpr int Dk = 32 * NPL, E = 4 * NPL, RB = WARPS * kWideSlots * RPL;  // E: columns per lane
  extern __shared__ float4 dsm4[];
  const ScanBufs sbuf = scan_bufs(reinterpret_cast<float*>(dsm4), Dk, RB);
  __shared__ float2 s_ab[kTS];  // (alpha, beta) per token of the current batch
  const int j = blockIdx.x, v0 = blockIdx.y * RB;
  const int Dv = g.Dv, hk = j / (g.Hv / g.Hk), vd = g.Hv * Dv;
  const int lane = threadIdx.x & 31, gr = lane & (kWideSlots - 1), c = lane / kWideSlots;
  const int rw = (threadIdx.x >> 5) * kWideSlots * RPL + gr;  // block-relative row of slot i: rw + 4 i
  float* S = g.S + int64_t(j) * Dv * Dk + 4 * c;                // + row * Dk + 32 m + e
  float* ob = g.obuf + j * Dv + v0 + rw;                        // + token * vd + 4 i
  stage_scan_batch<Dk>(g, sbuf, 0, 0, RB, j, hk, v0);
  bool live[RPL];   // row v0 + rw + 4 i exists (partial last block: the others hold zeros and are not stored)
  float s[RPL][E];  // s[i][4 m + e] = S[v0 + rw + 4 i][32 m + 4 c + e]
#pragma unroll
  for (int i = 0; i < RPL; ++i) {
    const int v = v0 + rw + kWideSlots * i;
    live[i] = v < Dv;
#pragma unroll
    for (int m = 0; m < NPL; ++m)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[i][4 * m + e] = live[i] ? S[int64_t(v) * Dk + 32 * m + e] : 0.f;
  }
  const float dtb = g.dt_bias[j], an = g.a_neg[j];
  float op[RPL] = {};  // this lane's partial o of the pending token tp (-1: none yet)
  int64_t tp = -1;
  int buf = 0;
  for (int t0 = 0; t0 < g.n; t0 += kTS, buf ^= 1) {
    const int nt = min(kTS, g.n - t0);
    cp_async_wait_all();  // batch b's copies: the only group in flight
    __syncthreads();      // ... visible to all; and every warp is done with batch b-1 (buffer buf ^ 1, s_ab)
    if (t0 + kTS < g.n) stage_scan_batch<Dk>(g, sbuf, buf ^ 1, t0 + kTS, RB, j, hk, v0);
    if (int(threadIdx.x) < nt) s_ab[threadIdx.x] = scan_gates(sbuf.ba + (buf * kTS + threadIdx.x) * 2, dtb, an);
    __syncthreads();
    const float* kb = sbuf.k + buf * kTS * Dk + 4 * c;  // + t * Dk: this lane's slice of token t
    const float* qb = sbuf.q + buf * kTS * Dk + 4 * c;
    const float* vb = sbuf.v + buf * kTS * RB + rw;     // + t * RB + 4 i
    for (int t = 0; t < nt; ++t) {
      float kr[E];
      load_slice<NPL>(kr, kb + t * Dk);
      const float2 ab = s_ab[t];
      float x[2 * RPL];  // [0, RPL): u of token t; [RPL, 2 RPL): o of token tp
#pragma unroll
      for (int i = 0; i < RPL; ++i) {
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int e = 0; e < E; ++e) {
          s[i][e] *= ab.x;
          a[e & 3] = fmaf(s[i][e], kr[e], a[e & 3]);
        }
        x[i] = sum4(a);
        x[RPL + i] = op[i];
      }
      slot_sum(x);
      if (c == 0 && tp >= 0) {
#pragma unroll
        for (int i = 0; i < RPL; ++i)
          if (live[i]) ob[tp * vd + kWideSlots * i] = x[RPL + i];
      }
      float qr[E];
      load_slice<NPL>(qr, qb + t * Dk);
#pragma unroll
      for (int i = 0; i < RPL; ++i) {
        const float d = ab.y * (vb[t * RB + kWideSlots * i] - x[i]);
        float a[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int e = 0; e < E; ++e) {
          s[i][e] = fmaf(kr[e], d, s[i][e]);
          a[e & 3] = fmaf(s[i][e], qr[e], a[e & 3]);
        }
        op[i] = sum4(a);
      }
      tp = t0 + t;
    }
  }
  slot_sum(op);  // the last token's output (n >= 1, so tp >= 0)
#pragma unroll
  for (int i = 0; i < RPL; ++i) {
    if (c == 0 && live[i]) ob[tp * vd + kWideSlots * i] = op[i];
    if (live[i]) {
      const int v = v0 + rw + kWideSlots * i;
#pragma unroll
      for (int m = 0; m < NPL; ++m)
#pragma unroll
        for (int e = 0; e < 4; ++e) S[int64_t(v) * Dk + 32 * m + e] = s[i][4 * m + e];
    }
  }
}

// one warp per (token, value head)
__global__ void k_norm(const GdnChunkArgs g) {
  const int lane = threadIdx.x & 31;
  const int64_t wi = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (wi >= int64_t(g.n) * g.Hv) return;
  const int t = int(wi / g.Hv), j = int(wi % g.Hv), Dv = g.Dv, vd = g.Hv * Dv;
  const int cd = 2 * g.Hk * g.Dk + vd;
  const float* o = g.obuf + int64_t(t) * vd + j * Dv;
  const float* z = g.proj + int64_t(t) * g.ldp + cd + j * Dv;
  float ss = 0.f;
  for (int i = lane; i < Dv; i += 32) ss += o[i] * o[i];
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / float(Dv) + g.eps);
  for (int i = lane; i < Dv; i += 32) {
    const float v = o[i] * r * g.norm_w[i] * silu_f(z[i]);
    if (g.y_f) g.y_f[int64_t(t) * vd + j * Dv + i] = v;
    else g.y[int64_t(t) * vd + j * Dv + i] = f2bf(v);
  }
}

// f(std::integral_constant<int, NPL>{}) for NPL = Dk / 32 (Dk in 32, 64, 96, 128: checked by prefill_gdn)
template <class F>
void with_npl(int Dk, F&& f) {
  switch (Dk / 32) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    default: f(std::integral_constant<int, 4>{}); break;
  }
}

void launch_scan_plain(const GdnChunkArgs& g, cudaStream_t s) {
  constexpr int RPW = 4, RB = kScanWarps * RPW;
  const dim3 grid(g.Hv, (g.Dv + RB - 1) / RB);
  with_npl(g.Dk, [&](auto npl) { k_scan<decltype(npl)::value, RPW><<<grid, kScanWarps * 32, 0, s>>>(g); });
}

// 2 warps x 4 row slots x 2 rows per lane = 16 rows per block: 256 blocks of 64 threads at the 35B sizes
// (Hv 32 x Dv 128). The alternative with the same block count, 1 row per lane
// and 4 warps (twice the warps to hide the shuffle latency, twice the k/q shared-memory reads per row), is
// kWideRPL = 1, kWideWarps = 4.
constexpr int kWideRPL = 2, kWideWarps = 2, kWideRB = kWideWarps * kWideSlots * kWideRPL;
void launch_scan_wide(const GdnChunkArgs& g, cudaStream_t s) {
  const dim3 grid(g.Hv, (g.Dv + kWideRB - 1) / kWideRB);
  with_npl(g.Dk, [&](auto npl) {
    constexpr int NPL = decltype(npl)::value;
    const size_t smem = scan_pipe_smem<NPL>(kWideRB);
    allow_smem(k_scan_wide<NPL, kWideRPL, kWideWarps>, smem);
    k_scan_wide<NPL, kWideRPL, kWideWarps><<<grid, kWideWarps * 32, smem, s>>>(g);
  });
}

void sequential_scan(const GdnChunkArgs& g, cudaStream_t s) {
  switch (prefill_gdn_scan_kernel(g)) {
    case kGdnScanPlain: launch_scan_plain(g, s); break;
    default: launch_scan_wide(g, s); break;
  }
  LILY_CUDA_CHECK_LAUNCH();
}
}  // namespace

const char* gdn_scan_name(int scan) {
  return scan == kGdnScanWide ? "wide" : "plain";
}

int prefill_gdn_scan_kernel(const GdnChunkArgs& g) {
  const int v = g.scan < 0 ? int(kGdnScanWide) : g.scan;  // wide: measured fastest
  if (v != kGdnScanPlain && v != kGdnScanWide) throw Error("prefill_gdn: unknown GdnChunkArgs::scan " + std::to_string(v));
  const int cd = 2 * g.Hk * g.Dk + g.Hv * g.Dv;  // cbuf row length; the cp.async kernels copy q, k by 16 bytes
  const bool rows16 = cd % 4 == 0 && (reinterpret_cast<uintptr_t>(g.cbuf) & 15u) == 0;
  return rows16 ? v : int(kGdnScanPlain);
}

void prefill_gdn(const GdnChunkArgs& g, cudaStream_t s) {
  if (g.n <= 0) return;
  if (g.Dk % 32 || g.Dk > 128 || g.Dv > 1024 || g.Dk > 1024 || g.Hv % g.Hk || g.K < 1)
    throw Error("prefill_gdn: unsupported head sizes (Dk in 32, 64, 96, 128; Hv % Hk == 0)");
  const int cd = 2 * g.Hk * g.Dk + g.Hv * g.Dv;
  const int bt = ((std::max(g.Dk, g.Dv) + 31) / 32) * 32;
  k_conv<<<dim3((g.n + kConvTT - 1) / kConvTT, 2 * g.Hk + g.Hv), bt, 0, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
  k_ring<<<(cd + 255) / 256, 256, 0, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
  if (prefill_gdn_uses_chunked(g)) prefill_gdn_chunked_scan(g, s);
  else sequential_scan(g, s);
  const int64_t warps = int64_t(g.n) * g.Hv;
  k_norm<<<unsigned((warps + 7) / 8), 256, 0, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
