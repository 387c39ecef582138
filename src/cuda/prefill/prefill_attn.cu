// Gated full attention over a chunk (KV cache layout as attn_decode.cu: [nkv][max_ctx][hd] fp16 per K and V):
//  k_prep: one warp per (token, slot): q heads RMSNorm + partial NeoX RoPE -> fp16 qb; k heads RMSNorm + RoPE
//    -> K cache at pos0 + t; v heads -> V cache (the same rope angles as the decode kernel; f2kv rounding).
//  k_flash: causal flash attention, mma.sync m16n8k16, f32 online softmax in exp2 space. Block = 64
//    queries of one q head (4 warps x 16 rows), key tiles of 64 from the cache (earlier chunks and this one);
//    S = Q K^T from ldmatrix fragments, P reused in registers as the A operand of P V (V via ldmatrix.trans).
//    fp16 Q, K, V and fp16 mma. PRECISE = false: P in fp16 (11 bits). PRECISE = true: P = P_hi + P_lo (two fp16
//    parts) and two mma per P V step, so P carries ~22 bits.
//    Epilogue: O / l * sigmoid(gate) -> bf16 (out) or f32 (out_f).
//  k_simple: one warp per (token, head), scalar online softmax (the reference / fallback path).
#include <algorithm>
#include <cfloat>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

__global__ void k_prep(const AttnChunkArgs a) {
  __shared__ float buf[8][256];
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
  const int slots = a.nq + 2 * a.nkv;
  const int64_t wi = int64_t(blockIdx.x) * 8 + w;
  if (wi >= int64_t(a.n) * slots) return;
  const int t = int(wi / slots), sl = int(wi % slots), hd = a.hd, pos = a.pos0 + t;
  const float* row = a.proj + int64_t(t) * a.ldp;
  const float* src;
  const float* nw = nullptr;
  uint16_t* dst;
  if (sl < a.nq) {
    src = row + sl * 2 * hd;
    nw = a.q_norm;
    dst = a.qb + (int64_t(t) * a.nq + sl) * hd;
  } else if (sl < a.nq + a.nkv) {
    const int h = sl - a.nq;
    src = row + a.nq * 2 * hd + h * hd;
    nw = a.k_norm;
    dst = a.kc + (int64_t(h) * a.max_ctx + pos) * hd;
  } else {
    const int h = sl - a.nq - a.nkv;
    src = row + a.nq * 2 * hd + a.nkv * hd + h * hd;
    dst = a.vc + (int64_t(h) * a.max_ctx + pos) * hd;
  }
  float* x = buf[w];
  float ss = 0.f;
  for (int d = lane; d < hd; d += 32) {
    x[d] = src[d];
    ss += x[d] * x[d];
  }
  if (nw) {
    ss = warp_sum(ss);
    const float r = rsqrtf(ss / float(hd) + a.eps);
    __syncwarp();
    for (int d = lane; d < hd; d += 32) x[d] = x[d] * r * nw[d];
    __syncwarp();
    const int half = a.rope_dim / 2;
    for (int j = lane; j < half; j += 32) {
      const double ang = double(pos) * pow(a.theta, -2.0 * j / double(a.rope_dim));
      double sn, cs;
      sincos(ang, &sn, &cs);
      const float p = x[j], q = x[j + half];
      x[j] = p * float(cs) - q * float(sn);
      x[j + half] = q * float(cs) + p * float(sn);
    }
  }
  __syncwarp();
  for (int d = lane; d < hd; d += 32) dst[d] = f2kv(x[d]);
}

constexpr int kBQ = 64, kBKV = 64;

template <int HD, bool PRECISE>
__global__ void __launch_bounds__(128) k_flash(const AttnChunkArgs a) {
  constexpr int SD = HD + 8;  // smem row stride (16-bit elements)
  constexpr int ND = HD / 8;  // n8 tiles of the output
  extern __shared__ uint4 smem_u4[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_u4);
  uint16_t* Ks = Qs + kBQ * SD;
  uint16_t* Vs = Ks + kBKV * SD;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int gq = lane >> 2, cq = lane & 3;
  const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y;
  const int kvh = h / (a.nq / a.nkv);
  const int q0 = qt * kBQ;                           // chunk-relative
  const int qlast = min(a.n, q0 + kBQ) - 1;
  const int hi = a.pos0 + qlast;                     // last key any row of this tile sees
  const uint16_t* Kc = a.kc + int64_t(kvh) * a.max_ctx * HD;
  const uint16_t* Vc = a.vc + int64_t(kvh) * a.max_ctx * HD;

  for (int i = tid; i < kBQ * (HD / 8); i += 128) {
    const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
    const int t = min(q0 + r, qlast);
    cp_async16(Qs + r * SD + c, a.qb + (int64_t(t) * a.nq + h) * HD + c);
  }
  cp_commit();

  float o[ND][4];
#pragma unroll
  for (int i = 0; i < ND; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-FLT_MAX, -FLT_MAX}, l[2] = {0.f, 0.f};
  const int qpos[2] = {a.pos0 + q0 + warp * 16 + gq, a.pos0 + q0 + warp * 16 + gq + 8};
  const float scale = rsqrtf(float(HD)) * kLog2e;

  const int nkt = hi / kBKV + 1;
  for (int kt = 0; kt < nkt; ++kt) {
    const int k0 = kt * kBKV;
    __syncthreads();
    for (int i = tid; i < kBKV * (HD / 8); i += 128) {
      const int r = i / (HD / 8), c = (i % (HD / 8)) * 8;
      const int64_t p = min(k0 + r, hi);
      cp_async16(Ks + r * SD + c, Kc + p * HD + c);
      cp_async16(Vs + r * SD + c, Vc + p * HD + c);
    }
    cp_commit();
    cp_wait<0>();
    __syncthreads();
    // S = Q K^T (16 x 64 per warp)
    float sc[8][4];
#pragma unroll
    for (int i = 0; i < 8; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
      uint32_t qa[4];
      ldsm_x4(qa, Qs + (warp * 16 + (lane & 15)) * SD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int nj = 0; nj < 4; ++nj) {
        uint32_t b[4];
        ldsm_x4(b, Ks + (nj * 16 + (lane & 7) + (lane >> 4) * 8) * SD + kk * 16 + ((lane >> 3) & 1) * 8);
        mma16816_f16(sc[2 * nj], qa, b[0], b[1]);
        mma16816_f16(sc[2 * nj + 1], qa, b[2], b[3]);
      }
    }
    // mask, online softmax
    float mx[2] = {m[0], m[1]};
#pragma unroll
    for (int ni = 0; ni < 8; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int key = k0 + ni * 8 + 2 * cq + (q & 1);
        const int hh = q >> 1;
        float v = sc[ni][q] * scale;
        if (key > qpos[hh]) v = -FLT_MAX;
        sc[ni][q] = v;
        mx[hh] = fmaxf(mx[hh], v);
      }
    float corr[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 1));
      mx[hh] = fmaxf(mx[hh], __shfl_xor_sync(0xffffffffu, mx[hh], 2));
      corr[hh] = exp2f(m[hh] - mx[hh]);
      m[hh] = mx[hh];
      l[hh] *= corr[hh];
    }
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      o[i][0] *= corr[0]; o[i][1] *= corr[0];
      o[i][2] *= corr[1]; o[i][3] *= corr[1];
    }
    // P (per 16-key step kk: key columns ni = 2kk, 2kk+1) packed as the A operand, then O += P V
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      uint32_t pa[4];
      [[maybe_unused]] uint32_t pl[4];
#pragma unroll
      for (int h2 = 0; h2 < 2; ++h2) {
        const int ni = 2 * kk + h2;
        float p[4];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const int hh = q >> 1;
          p[q] = sc[ni][q] == -FLT_MAX ? 0.f : exp2f(sc[ni][q] - m[hh]);
          l[hh] += p[q];
        }
        pa[h2 * 2 + 0] = pack_h2(p[0], p[1]);
        pa[h2 * 2 + 1] = pack_h2(p[2], p[3]);
        if constexpr (PRECISE) {  // low parts: p - fp16(p), exact in f32
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            float l0, l1;
            kv2f2(pa[h2 * 2 + j], l0, l1);
            pl[h2 * 2 + j] = pack_h2(p[2 * j] - l0, p[2 * j + 1] - l1);
          }
        }
      }
#pragma unroll
      for (int dj = 0; dj < HD / 16; ++dj) {
        uint32_t b[4];
        ldsm_x4_t(b, Vs + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * SD + dj * 16 + (lane >> 4) * 8);
        mma16816_f16(o[2 * dj], pa, b[0], b[1]);
        mma16816_f16(o[2 * dj + 1], pa, b[2], b[3]);
        if constexpr (PRECISE) {
          mma16816_f16(o[2 * dj], pl, b[0], b[1]);
          mma16816_f16(o[2 * dj + 1], pl, b[2], b[3]);
        }
      }
    }
  }
  // epilogue
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 1);
    l[hh] += __shfl_xor_sync(0xffffffffu, l[hh], 2);
  }
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int t = q0 + warp * 16 + gq + 8 * hh;
    if (t >= a.n) continue;
    const float inv = 1.f / l[hh];
    const float* gate = a.proj + int64_t(t) * a.ldp + h * 2 * HD + HD;
    const int64_t ob = int64_t(t) * a.nq * HD + h * HD;
#pragma unroll
    for (int i = 0; i < ND; ++i) {
      const int d = i * 8 + 2 * cq;
      const float v0 = o[i][2 * hh] * inv * sigmoid_f(gate[d]), v1 = o[i][2 * hh + 1] * inv * sigmoid_f(gate[d + 1]);
      if (a.out_f) {
        a.out_f[ob + d] = v0;
        a.out_f[ob + d + 1] = v1;
      } else {
        a.out[ob + d] = f2bf(v0);
        a.out[ob + d + 1] = f2bf(v1);
      }
    }
  }
}

__global__ void k_simple(const AttnChunkArgs a) {
  const int lane = threadIdx.x & 31;
  const int64_t wi = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (wi >= int64_t(a.n) * a.nq) return;
  const int t = int(wi / a.nq), h = int(wi % a.nq), hd = a.hd, nd = hd / 32;
  const int kvh = h / (a.nq / a.nkv), pos = a.pos0 + t;
  const uint16_t* Kc = a.kc + int64_t(kvh) * a.max_ctx * hd;
  const uint16_t* Vc = a.vc + int64_t(kvh) * a.max_ctx * hd;
  float q[8], acc[8];
  const float scale = rsqrtf(float(hd)) * kLog2e;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint16_t qv = i < nd ? a.qb[(int64_t(t) * a.nq + h) * hd + lane + 32 * i] : uint16_t(0);
    q[i] = i < nd ? kv2f(qv) * scale : 0.f;
    acc[i] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int p = 0; p <= pos; ++p) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < nd) s = fmaf(q[i], kv2f(Kc[int64_t(p) * hd + lane + 32 * i]), s);
    s = warp_sum(s);
    const float mn = fmaxf(m, s), c = exp2f(m - mn), e = exp2f(s - mn);
    l = l * c + e;
    m = mn;
#pragma unroll
    for (int i = 0; i < 8; ++i)
      if (i < nd) acc[i] = fmaf(acc[i], c, e * kv2f(Vc[int64_t(p) * hd + lane + 32 * i]));
  }
  const float* gate = a.proj + int64_t(t) * a.ldp + h * 2 * hd + hd;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i < nd) {
      const int d = lane + 32 * i;
      const float v = acc[i] / l * sigmoid_f(gate[d]);
      if (a.out_f) a.out_f[int64_t(t) * a.nq * hd + h * hd + d] = v;
      else a.out[int64_t(t) * a.nq * hd + h * hd + d] = f2bf(v);
    }
}

template <int HD, bool PRECISE>
void run_flash_p(const AttnChunkArgs& a, cudaStream_t s) {
  constexpr size_t smem = size_t(kBQ + 2 * kBKV) * (HD + 8) * 2;
  static bool once = [] {
    LILY_CUDA_CHECK(
        cudaFuncSetAttribute(k_flash<HD, PRECISE>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)once;
  k_flash<HD, PRECISE><<<dim3((a.n + kBQ - 1) / kBQ, a.nq), 128, smem, s>>>(a);
  LILY_CUDA_CHECK_LAUNCH();
}
template <int HD>
void run_flash(const AttnChunkArgs& a, cudaStream_t s) {
  if (a.precise) run_flash_p<HD, true>(a, s);
  else run_flash_p<HD, false>(a, s);
}

}  // namespace

void prefill_attn(const AttnChunkArgs& a, cudaStream_t s, bool simple) {
  if (a.n <= 0) return;
  if (a.nkv < 1 || a.nq % a.nkv || a.hd % 32 || a.hd > 256 || a.rope_dim > a.hd)
    throw Error("prefill_attn: unsupported head configuration");
  const int64_t prep_warps = int64_t(a.n) * (a.nq + 2 * a.nkv);
  k_prep<<<unsigned((prep_warps + 7) / 8), 256, 0, s>>>(a);
  LILY_CUDA_CHECK_LAUNCH();
  if (!simple && a.hd == 256) return run_flash<256>(a, s);
  if (!simple && a.hd == 128) return run_flash<128>(a, s);
  if (!simple && a.hd == 64) return run_flash<64>(a, s);
  const int64_t warps = int64_t(a.n) * a.nq;
  k_simple<<<unsigned((warps + 7) / 8), 256, 0, s>>>(a);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
