// Device helpers shared by the decode kernels: swizzled shared-memory activation vectors, streaming 16-byte
// weight loads, the 4/8-bit "1 + q/2^bits" float trick, warp/block reductions, and programmatic dependent
// launch (PDL) hooks (no-ops below sm_90 or when the kernel was not launched with PDL).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace lily::cuda {

// ---- PDL ----
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Launch helper: cudaLaunchKernelEx with the programmatic-serialization attribute when pdl is set.
template <typename... KArgs, typename... Args>
void launch(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, k, std::forward<Args>(args)...);
  if (e != cudaSuccess) ::lily::cuda::cuda_fail(e, "cudaLaunchKernelEx", __FILE__, __LINE__);
}

// ---- loads ----
__device__ __forceinline__ uint4 ldg_stream(const void* p) {  // read-only, do not keep in L1
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// ---- cp.async (sm_80+): weights that do not depend on the previous kernel staged into shared memory before
// pdl_wait, so their latency overlaps the wait and the x prologue ----
__device__ __forceinline__ void cp_async16(void* smem, const void* g) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Starts copying n floats (n % 4 == 0) of src into shared dst; returns the pointer to read them through (dst, or
// src itself when src is null or not 16-byte aligned). load_x waits for the copies (cp_async_wait_all + barrier).
__device__ __forceinline__ const float* stage_vec(const float* src, int n, float* dst) {
  if (!src || (reinterpret_cast<uintptr_t>(src) & 15u)) return src;
  for (int i = threadIdx.x * 4; i < n; i += blockDim.x * 4) cp_async16(dst + i, src + i);
  cp_async_commit();
  return dst;
}

__device__ __forceinline__ float bf_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf_hi(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ uint16_t f2bf(float f) {  // round to nearest even
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }

// ---- swizzled activation vector in shared memory ----
// Element i lives at chunk c = i/32 (32 floats = all banks), float4 slot j = (i/4)%8 stored at j ^ (c%8), so
// the lanes of a warp reading "float4 j of their own chunk" hit distinct banks.
__device__ __forceinline__ int swz(int i) {
  int c = i >> 5, j = (i >> 2) & 7;
  return (c << 5) | ((j ^ (c & 7)) << 2) | (i & 3);
}
__device__ __forceinline__ float4 lds4(const float* xs, int c32, int j) {
  return *reinterpret_cast<const float4*>(xs + (c32 << 5) + ((j ^ (c32 & 7)) << 2));
}

// ---- reductions ----
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Sum over the block (blockDim.x multiple of 32, <= 1024); red has 32 floats; every thread gets the result.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
  return warp_sum(t);
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.f + __expf(-x)); }
__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + __expf(-x)); }

// Loads x[0..n) into swizzled shared xs, times rsqrt(mean(x^2)+eps)*norm_w when norm_w != null, and the
// per-16-element sums into xsum16[n/16]. red: 32 floats of scratch. Ends with __syncthreads().
// Each thread owns whole 16-element groups; its x loads (float4) are all issued before any is used, so the
// prologue costs ~two round trips (x, then norm_w) instead of one per element per thread as before.
// Requires n % 16 == 0 (callers check n % 32 == 0). norm_w may point to global or (staged by stage_vec) shared memory.
__device__ __forceinline__ void load_x(const float* __restrict__ x, const float* __restrict__ norm_w, float eps,
                                       int n, float* xs, float* xsum16, float* red) {
  constexpr int kMaxG = 2;  // groups of x held in registers per thread (longer x: plain loop below)
  const int ng = n / 16;
  float4 v[kMaxG][4];
#pragma unroll
  for (int k = 0; k < kMaxG; ++k) {
    const int g = threadIdx.x + k * blockDim.x;
    if (g < ng) {
      const float4* xp = reinterpret_cast<const float4*>(x) + g * 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) v[k][i] = xp[i];
    }
  }
  float r = 1.f;
  if (norm_w) {
    cp_async_wait_all();  // norm_w may be staged in shared memory (stage_vec); block_sum's barrier publishes it
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxG; ++k)
      if (threadIdx.x + k * blockDim.x < ng)
#pragma unroll
        for (int i = 0; i < 4; ++i) ss += v[k][i].x * v[k][i].x + v[k][i].y * v[k][i].y + v[k][i].z * v[k][i].z + v[k][i].w * v[k][i].w;
    for (int g = threadIdx.x + kMaxG * blockDim.x; g < ng; g += blockDim.x)  // very long x: plain loop
      for (int e = 0; e < 16; ++e) ss += x[g * 16 + e] * x[g * 16 + e];
    ss = block_sum(ss, red);
    r = rsqrtf(ss / float(n) + eps);
  }
  auto put = [&](int g, float4 a, float4 b, float4 c, float4 d) {
    // a..d = elements 16g .. 16g+15; float4 slot j of chunk c32 = g/2 is (g%2)*4 + i
    const int c32 = g >> 1, j0 = (g & 1) * 4;
    float* base = xs + (c32 << 5);
    *reinterpret_cast<float4*>(base + (((j0 + 0) ^ (c32 & 7)) << 2)) = a;
    *reinterpret_cast<float4*>(base + (((j0 + 1) ^ (c32 & 7)) << 2)) = b;
    *reinterpret_cast<float4*>(base + (((j0 + 2) ^ (c32 & 7)) << 2)) = c;
    *reinterpret_cast<float4*>(base + (((j0 + 3) ^ (c32 & 7)) << 2)) = d;
    xsum16[g] = ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +
                ((d.x + d.y) + (d.z + d.w));
  };
  auto scale = [&](float4 a, float4 b) {
    return norm_w ? make_float4(a.x * r * b.x, a.y * r * b.y, a.z * r * b.z, a.w * r * b.w) : a;
  };
#pragma unroll
  for (int k = 0; k < kMaxG; ++k) {
    const int g = threadIdx.x + k * blockDim.x;
    if (g < ng) {
      float4 w[4] = {};
      if (norm_w) {
        const float4* wp = reinterpret_cast<const float4*>(norm_w) + g * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = wp[i];  // shared (staged) or global
      }
      put(g, scale(v[k][0], w[0]), scale(v[k][1], w[1]), scale(v[k][2], w[2]), scale(v[k][3], w[3]));
    }
  }
  for (int g = threadIdx.x + kMaxG * blockDim.x; g < ng; g += blockDim.x) {
    const float4* xp = reinterpret_cast<const float4*>(x) + g * 4;
    const float4* wp = reinterpret_cast<const float4*>(norm_w) + g * 4;
    float4 a[4];
    for (int i = 0; i < 4; ++i) a[i] = norm_w ? scale(xp[i], wp[i]) : xp[i];
    put(g, a[0], a[1], a[2], a[3]);
  }
  __syncthreads();
}

// ---- per-chunk dot products: one 16-byte piece of a weight row against the matching x ----
// Elements per 16-byte chunk for each format.
template <int FMT> struct FmtInfo;
template <> struct FmtInfo<kQ4> { static constexpr int kElems = 32; };
template <> struct FmtInfo<kQ8> { static constexpr int kElems = 16; };
template <> struct FmtInfo<kBF16> { static constexpr int kElems = 8; };

// nibble K of w as the float 1 + q/16 (q moved to the top mantissa bits); byte K as 1 + q/256.
template <int K> __device__ __forceinline__ float q4f(uint32_t w) {
  uint32_t t = (K <= 4) ? (w << (19 - 4 * K)) : (w >> (4 * K - 19));
  return __uint_as_float((t & 0x00780000u) | 0x3f800000u);
}
template <int K> __device__ __forceinline__ float q8f(uint32_t w) {
  uint32_t t = (K <= 1) ? (w << (15 - 8 * K)) : (w >> (8 * K - 15));
  return __uint_as_float((t & 0x007f8000u) | 0x3f800000u);
}

// Sum_i w_i x_i over one chunk. xc = the chunk's index in x (units of this format's chunk), raw = the 16 bytes,
// sb = (scale, bias) of the chunk's group. Uses s*Sum(x q) + b*Sum(x) with Sum(x q) = 2^bits (Sum(x f) - Sum(x)).
template <int FMT>
__device__ __forceinline__ float chunk_dot(uint4 raw, uint32_t sb, const float* xs, const float* xsum16, int xc);

template <>
__device__ __forceinline__ float chunk_dot<kQ4>(uint4 raw, uint32_t sb, const float* xs, const float* xsum16,
                                                int xc) {
  const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float4 x0 = lds4(xs, xc, 2 * i), x1 = lds4(xs, xc, 2 * i + 1);
    a0 = fmaf(x0.x, q4f<0>(wv[i]), a0);
    a1 = fmaf(x0.y, q4f<1>(wv[i]), a1);
    a0 = fmaf(x0.z, q4f<2>(wv[i]), a0);
    a1 = fmaf(x0.w, q4f<3>(wv[i]), a1);
    a0 = fmaf(x1.x, q4f<4>(wv[i]), a0);
    a1 = fmaf(x1.y, q4f<5>(wv[i]), a1);
    a0 = fmaf(x1.z, q4f<6>(wv[i]), a0);
    a1 = fmaf(x1.w, q4f<7>(wv[i]), a1);
  }
  const float s16 = 16.f * bf_lo(sb), b = bf_hi(sb);
  const float xsum = xsum16[2 * xc] + xsum16[2 * xc + 1];
  return fmaf(s16, a0 + a1, (b - s16) * xsum);
}

template <>
__device__ __forceinline__ float chunk_dot<kQ8>(uint4 raw, uint32_t sb, const float* xs, const float* xsum16,
                                                int xc) {
  const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
  const int c32 = xc >> 1, j0 = (xc & 1) * 4;
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float4 x0 = lds4(xs, c32, j0 + i);
    a0 = fmaf(x0.x, q8f<0>(wv[i]), a0);
    a1 = fmaf(x0.y, q8f<1>(wv[i]), a1);
    a0 = fmaf(x0.z, q8f<2>(wv[i]), a0);
    a1 = fmaf(x0.w, q8f<3>(wv[i]), a1);
  }
  const float s256 = 256.f * bf_lo(sb), b = bf_hi(sb);
  return fmaf(s256, a0 + a1, (b - s256) * xsum16[xc]);
}

template <>
__device__ __forceinline__ float chunk_dot<kBF16>(uint4 raw, uint32_t, const float* xs, const float*, int xc) {
  const int c32 = xc >> 2, j0 = (xc & 3) * 2;
  float4 x0 = lds4(xs, c32, j0), x1 = lds4(xs, c32, j0 + 1);
  float a = 0.f;
  a = fmaf(x0.x, bf_lo(raw.x), a);
  a = fmaf(x0.y, bf_hi(raw.x), a);
  a = fmaf(x0.z, bf_lo(raw.y), a);
  a = fmaf(x0.w, bf_hi(raw.y), a);
  a = fmaf(x1.x, bf_lo(raw.z), a);
  a = fmaf(x1.y, bf_hi(raw.z), a);
  a = fmaf(x1.z, bf_lo(raw.w), a);
  a = fmaf(x1.w, bf_hi(raw.w), a);
  return a;
}

// Loads of chunk c of row `row` of m: the 16 bytes and the (scale, bias) word of its group.
template <int FMT>
__device__ __forceinline__ void chunk_load(const DMat& m, int64_t row, int c, uint4& raw, uint32_t& sb) {
  raw = ldg_stream(m.w + row * m.row_bytes + int64_t(c) * 16);
  if constexpr (FMT != kBF16) {
    sb = __ldg(m.sb + row * m.sb_row + (c * FmtInfo<FMT>::kElems) / m.group);
  } else {
    sb = 0;
  }
}

// Partial (per-lane) dot of row `row` of m with x (xs/xsum16 at chunk offset xc0); lanes stride by 32 chunks.
template <int FMT>
__device__ __forceinline__ float row_dot_lane(const DMat& m, int64_t row, const float* xs, const float* xsum16,
                                              int xc0, int lane) {
  constexpr int U = 4;
  const int nch = m.cols / FmtInfo<FMT>::kElems;
  float acc = 0.f;
  for (int c0 = 0; c0 < nch; c0 += 32 * U) {
    uint4 raw[U];
    uint32_t sb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) chunk_load<FMT>(m, row, c, raw[u], sb[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) acc += chunk_dot<FMT>(raw[u], sb[u], xs, xsum16, xc0 + c);
    }
  }
  return acc;
}

// Two rows at once (all their loads in flight before any math): partial dots of rows r0 of m0 and r1 of m1
// (same format and cols). r1 < 0: only the first.
template <int FMT>
__device__ __forceinline__ void row_dot2_lane(const DMat& m0, int64_t r0, const DMat& m1, int64_t r1,
                                              const float* xs, const float* xsum16, int lane, float& a0,
                                              float& a1) {
  constexpr int U = 2;
  const int nch = m0.cols / FmtInfo<FMT>::kElems;
  a0 = 0.f;
  a1 = 0.f;
  for (int c0 = 0; c0 < nch; c0 += 32 * U) {
    uint4 raw0[U], raw1[U];
    uint32_t sb0[U], sb1[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        chunk_load<FMT>(m0, r0, c, raw0[u], sb0[u]);
        if (r1 >= 0) chunk_load<FMT>(m1, r1, c, raw1[u], sb1[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        a0 += chunk_dot<FMT>(raw0[u], sb0[u], xs, xsum16, c);
        if (r1 >= 0) a1 += chunk_dot<FMT>(raw1[u], sb1[u], xs, xsum16, c);
      }
    }
  }
}

// Software-pipelined pair of rows: the 16-byte chunks [c0, c0 + 64) of two rows held in registers.
template <int FMT>
struct RowPair {
  uint4 raw0[2], raw1[2];
  uint32_t sb0[2], sb1[2];
  __device__ __forceinline__ void load(const DMat& m0, int64_t r0, const DMat& m1, int64_t r1, int c0, int lane) {
    const int nch = m0.cols / FmtInfo<FMT>::kElems;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        chunk_load<FMT>(m0, r0, c, raw0[u], sb0[u]);
        if (r1 >= 0) chunk_load<FMT>(m1, r1, c, raw1[u], sb1[u]);
      }
    }
  }
  __device__ __forceinline__ void dot(const DMat& m0, int64_t r1, const float* xs, const float* xsum16, int c0,
                                      int lane, float& a0, float& a1) const {
    const int nch = m0.cols / FmtInfo<FMT>::kElems;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        a0 += chunk_dot<FMT>(raw0[u], sb0[u], xs, xsum16, c);
        if (r1 >= 0) a1 += chunk_dot<FMT>(raw1[u], sb1[u], xs, xsum16, c);
      }
    }
  }
};

// Issues L2 prefetches of the first bytes of a row (used before pdl_wait to overlap the launch gap).
__device__ __forceinline__ void prefetch_row(const DMat& m, int64_t row, int lane) {
  const int64_t off = int64_t(lane) * 128;
  if (off < m.row_bytes) prefetch_l2(m.w + row * m.row_bytes + off);
}

}  // namespace lily::cuda
