// Gated DeltaNet over a chunk of n tokens (same state layout as gdn_decode.cu, so decode continues from it):
//  k_conv: causal depthwise conv + SiLU per (token tile, channel group of one head); the K-1 inputs before the
//    chunk come from the conv ring (slot p % K holds position p); q/k heads l2-normalised (q also * 1/sqrt(Dk)).
//  k_ring: writes the chunk's last K-1 raw inputs into the ring (after k_conv has read the old ones).
//  k_scan: the gated delta rule as a sequential scan. Grid (Hv, Dv / rows-per-block): the rows of S_j are
//    independent, so each block keeps its rows of the fp32 state in registers for the whole chunk (each warp owns
//    RPW rows, lane holds Dk/32 columns) and walks the tokens, staged 32 at a time in shared memory.
//  k_norm: gated RMSNorm per (token, head) -> bf16 input of out_proj.
#include <algorithm>

#include "cuda/prefill.h"
#include "cuda/prefill_util.cuh"

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
        else if (g.pos0 + p >= 0) xin = g.ring[int64_t((g.pos0 + p) % K) * cd + ch];
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
    g.ring[int64_t(p % g.K) * cd + ch] = g.proj[int64_t(t) * g.ldp + ch];
  }
}

constexpr int kScanWarps = 8, kTS = 32;

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
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int v = v0 + warp * RPW + i;
#pragma unroll
    for (int e = 0; e < NPL; ++e) s[i][e] = v < Dv ? S[int64_t(v) * Dk + lane * NPL + e] : 0.f;
  }
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
#pragma unroll
      for (int i = 0; i < RPW; ++i) {
        float u = 0.f;
#pragma unroll
        for (int e = 0; e < NPL; ++e) { s[i][e] *= alpha; u = fmaf(s[i][e], kr[e], u); }
        u = warp_sum(u);
        const float d = beta * (vs[t][warp * RPW + i] - u);
        float o = 0.f;
#pragma unroll
        for (int e = 0; e < NPL; ++e) { s[i][e] = fmaf(kr[e], d, s[i][e]); o = fmaf(s[i][e], qr[e], o); }
        o = warp_sum(o);
        if (lane == 0) os[t][warp * RPW + i] = o;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nt * RB; i += blockDim.x) {
      const int t = i / RB, r = i % RB;
      if (v0 + r < Dv) g.obuf[int64_t(t0 + t) * vd + j * Dv + v0 + r] = os[t][r];
    }
  }
#pragma unroll
  for (int i = 0; i < RPW; ++i) {
    const int v = v0 + warp * RPW + i;
    if (v < Dv) {
#pragma unroll
      for (int e = 0; e < NPL; ++e) S[int64_t(v) * Dk + lane * NPL + e] = s[i][e];
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

}  // namespace

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
  constexpr int RPW = 4, RB = kScanWarps * RPW;
  const dim3 grid(g.Hv, (g.Dv + RB - 1) / RB);
  switch (g.Dk / 32) {
    case 1: k_scan<1, RPW><<<grid, kScanWarps * 32, 0, s>>>(g); break;
    case 2: k_scan<2, RPW><<<grid, kScanWarps * 32, 0, s>>>(g); break;
    case 3: k_scan<3, RPW><<<grid, kScanWarps * 32, 0, s>>>(g); break;
    default: k_scan<4, RPW><<<grid, kScanWarps * 32, 0, s>>>(g); break;
  }
  LILY_CUDA_CHECK_LAUNCH();
  const int64_t warps = int64_t(g.n) * g.Hv;
  k_norm<<<unsigned((warps + 7) / 8), 256, 0, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
