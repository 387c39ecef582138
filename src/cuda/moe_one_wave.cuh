// The one-wave MoE (LILY_CUDA_MOE_ONE_WAVE=1, MoeArgs::ow_*): the fused router + gate_up kernel also does MoE down,
// so the down matrices are requested in the same DRAM wave as the routed gate/up rows instead of by a second kernel
// after every act value is written. Block b's act rows are whole 8-row segments of one expert (work units
// 8 b + nwarps t, t < kOwMaxSeg: one unit per warp and round), so the block holds the act values of 8 down columns
// per segment. Those columns' weights and (scale, bias) words come from a column-blocked copy of down
// (DColBlk: [E][cols / 8][H] words and [E][cols / group][H] words, made at load), 2 x H x 4 bytes per segment, copied
// into shared memory by bulk copies once the routing is known. Each block writes its partial sums of the H outputs
// (ow_part[block][H]); after a grid barrier block b adds rows [b R, (b + 1) R) over the blocks in block order into the
// residual (the same sums in the same order on every run). Down here uses the f32 act values, or (MoeArgs::ow_int8)
// each segment's 8 values in the int8 hi + lo form (XqCodes) for dp4a (the two-kernel form quantises the act vector
// in 32-value chunks).
#pragma once

#include <cstdint>

#include "cuda/device_util.cuh"
#include "cuda/kernels.h"

namespace lily::cuda::moe_detail {

constexpr int kOwMaxSeg = 3;  // segments (rounds of units) per block

// mbarrier + bulk copies (sm_90); elsewhere the copies are plain loads by thread 0 (correct, slow: the host enables
// the one-wave form on sm_90 only)
__device__ __forceinline__ void ow_bar_init(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(b) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#else
  (void)bar;
#endif
}
// bytes more to arrive on bar; arrive: also the barrier's one arrival (else the copies' bytes only)
__device__ __forceinline__ void ow_bar_expect(uint64_t* bar, uint32_t bytes, bool arrive) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  if (arrive) asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
  else asm volatile("mbarrier.expect_tx.shared.b64 [%0], %1;" ::"r"(b), "r"(bytes) : "memory");
#else
  (void)bar, (void)bytes, (void)arrive;
#endif
}
__device__ __forceinline__ void ow_bulk(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(d),
               "l"(src), "r"(bytes), "r"(b)
               : "memory");
#else
  (void)bar;
  const uint4* s = static_cast<const uint4*>(src);
  uint4* o = static_cast<uint4*>(dst);
  for (uint32_t i = 0; i < bytes / 16; ++i) o[i] = s[i];
#endif
}
__device__ __forceinline__ void ow_bar_wait(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t b = static_cast<uint32_t>(__cvta_generic_to_shared(bar));
  uint32_t done = 0;
  while (!done)
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared.b64 p, [%1], 0;\n selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(b)
        : "memory");
#else
  (void)bar;
#endif
}

// Block b's segments: unit u0 = 8 b + nwarps t is the first of 8 units whose act rows unit_row(u0) + i (i < 8) lie
// in one expert: slot j (k: the shared expert) and column col0 within it.
struct OwSeg {
  int j = -1, col0 = 0;
};
struct OneWave {
  // shared memory at a.ow_off (16-aligned): w[kOwMaxSeg][H], sb[kOwMaxSeg][H] words
  static constexpr size_t bytes(int H) { return size_t(2) * kOwMaxSeg * H * 4; }
  OwSeg seg[kOwMaxSeg];
  int nseg = 0;
  template <class UnitRow>
  __device__ __forceinline__ void plan(const MoeArgs& a, int n_units, int nwarps, UnitRow unit_row) {
    const int I = a.gate.m.rows, kI = a.k * I;
#pragma unroll
    for (int t = 0; t < kOwMaxSeg; ++t) {
      const int u0 = 8 * int(blockIdx.x) + nwarps * t;
      if (u0 < n_units) {
        const int r = unit_row(u0);
        seg[t].j = r < kI ? r / I : a.k;
        seg[t].col0 = r < kI ? r % I : r - kI;
        nseg = t + 1;
      }
    }
  }
  // thread 0: the segments' down columns into shared memory (one mbarrier for all). shared: the shared expert's
  // segments, before the PDL wait (weights: no routing needed; expect_tx without arrival); else the routed ones, the
  // routing known (the barrier's one arrival)
  __device__ __forceinline__ void issue(const MoeArgs& a, const int* s_idx, uint32_t* sm, uint64_t* bar,
                                        bool shared) const {
    const int H = a.ow_down.rows;
    const uint32_t row_bytes = uint32_t(H) * 4;
    uint32_t n = 0;
#pragma unroll
    for (int t = 0; t < kOwMaxSeg; ++t)
      if (t < nseg && (seg[t].j == a.k) == shared) ++n;
    if (n || !shared) ow_bar_expect(bar, 2 * n * row_bytes, !shared);
#pragma unroll
    for (int t = 0; t < kOwMaxSeg; ++t) {
      if (t >= nseg) break;
      if ((seg[t].j == a.k) != shared) continue;
      const DColBlk& m = seg[t].j < a.k ? a.ow_down : a.ow_sh_down;
      const int64_t e = seg[t].j < a.k ? s_idx[seg[t].j] : 0;
      const uint32_t* w = m.w + (e * m.cb_per_e + seg[t].col0 / 8) * H;
      const uint32_t* sb = m.sb + (e * m.g_per_e + seg[t].col0 / m.group) * H;
      ow_bulk(sm + size_t(t) * H, w, row_bytes, bar);
      ow_bulk(sm + size_t(kOwMaxSeg + t) * H, sb, row_bytes, bar);
    }
  }
  // out[r] = sum over the segments t of s * sq(t, w) + b * asum[t] for row r's word w and (scale, bias) s, b
  template <class SQ>
  __device__ __forceinline__ void rows(const MoeArgs& a, const uint32_t* sm, const float* asum, float* out,
                                       SQ&& sq) const {
    const int H = a.ow_down.rows;
    for (int r = threadIdx.x; r < H; r += blockDim.x) {
      float acc = 0.f;
#pragma unroll
      for (int t = 0; t < kOwMaxSeg; ++t) {
        if (t >= nseg) break;
        const uint32_t w = sm[size_t(t) * H + r], sb = sm[size_t(kOwMaxSeg + t) * H + r];
        acc += fmaf(bf_lo(sb), sq(t, w), bf_hi(sb) * asum[t]);
      }
      out[r] = acc;
    }
  }
  // after the block's act values (s_act[t][8], unscaled) and the copies landed: this block's partial sums of the H
  // outputs, weight wt[t] per segment, into a.ow_part[blockIdx.x]
  __device__ __forceinline__ void partial(const MoeArgs& a, const uint32_t* sm, const float* s_act,
                                          const float* wt) const {
    const int H = a.ow_down.rows;
    float av[kOwMaxSeg][8], asum[kOwMaxSeg];
#pragma unroll
    for (int t = 0; t < kOwMaxSeg; ++t) {
      asum[t] = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        av[t][i] = t < nseg ? wt[t] * s_act[t * 8 + i] : 0.f;
        asum[t] += av[t][i];
      }
    }
    float* out = a.ow_part + int64_t(blockIdx.x) * H;
    if (a.ow_int8) {  // each segment's 8 values as d (254 h + l) (XqCodes of their max), dotted by dp4a
      int he[kOwMaxSeg], ho[kOwMaxSeg], le[kOwMaxSeg], lo[kOwMaxSeg];
      float dq[kOwMaxSeg];
#pragma unroll
      for (int t = 0; t < kOwMaxSeg; ++t) {
        float amax = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(av[t][i]));
        const XqCodes q(amax);
        uint32_t h[8], l[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) q.code(av[t][i], h[i], l[i]);
        auto pk = [](const uint32_t* c, int o) {  // the low bytes of c[o], c[o + 2], c[o + 4], c[o + 6]
          return int(__byte_perm(__byte_perm(c[o], c[o + 2], 0x0040), __byte_perm(c[o + 4], c[o + 6], 0x0040), 0x5410));
        };
        he[t] = pk(h, 0), ho[t] = pk(h, 1), le[t] = pk(l, 0), lo[t] = pk(l, 1);
        dq[t] = q.scale();
      }
      constexpr uint32_t m = 0x0f0f0f0fu;
      rows(a, sm, asum, out, [&](int t, uint32_t w) {
        const int we = int(w & m), wo = int((w >> 4) & m);  // elements 0, 2, 4, 6 / 1, 3, 5, 7 as bytes
        const int sh = __dp4a(wo, ho[t], __dp4a(we, he[t], 0)), sl = __dp4a(wo, lo[t], __dp4a(we, le[t], 0));
        return float(sh * 254 + sl) * dq[t];
      });
      return;
    }
    rows(a, sm, asum, out, [&](int t, uint32_t w) {
      float sq = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) sq = fmaf(float((w >> (4 * i)) & 15u), av[t][i], sq);
      return sq;
    });
  }
};

// After a grid barrier: block b adds the blocks' partial sums of rows [b R, (b + 1) R), R = ceil(H / gridDim), into
// a.out, in block order (thread (i, g) sums blocks g, g + G, ... of row i; then the G sums in g order). red: blockDim
// floats.
__device__ __forceinline__ void ow_reduce(const MoeArgs& a, float* red) {
  const int H = a.ow_down.rows, nb = gridDim.x;
  const int R = (H + nb - 1) / nb, r0 = int(blockIdx.x) * R;
  const int RP = R < 32 ? R : 32, G = int(blockDim.x) / RP;
  const int i = int(threadIdx.x) % RP, g = int(threadIdx.x) / RP;
  for (int i0 = 0; i0 < R && r0 + i0 < H; i0 += RP) {
    const int r = r0 + i0 + i;
    float s = 0.f;
    if (g < G && i0 + i < R && r < H) {
      constexpr int kB = 12;  // loads in flight at once (one L2 round trip for nb <= kB G)
      for (int p0 = g; p0 < nb; p0 += kB * G) {
        float v[kB];
#pragma unroll
        for (int u = 0; u < kB; ++u) {
          const int p = p0 + u * G;
          v[u] = p < nb ? __ldcg(a.ow_part + int64_t(p) * H + r) : 0.f;
        }
#pragma unroll
        for (int u = 0; u < kB; ++u) s += v[u];
      }
    }
    red[threadIdx.x] = s;
    __syncthreads();
    if (int(threadIdx.x) < RP && i0 + int(threadIdx.x) < R && r0 + i0 + int(threadIdx.x) < H) {
      float t = 0.f;
      for (int q = 0; q < G; ++q) t += red[q * RP + threadIdx.x];
      a.out[r0 + i0 + threadIdx.x] += t;
    }
    __syncthreads();
  }
}

}  // namespace lily::cuda::moe_detail
