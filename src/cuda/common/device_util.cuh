// Device helpers shared by the decode kernels: swizzled shared-memory activation vectors, streaming 16-byte
// weight loads, the 4/8-bit "1 + q/2^bits" float trick, warp/block reductions, and programmatic dependent
// launch (PDL) hooks (no-ops below sm_90 or when the kernel was not launched with PDL).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "cuda/common/cuda_check.h"
#include "cuda/decode/kernels.h"
#include "cuda/common/weight_loads.cuh"

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

// ---- in-graph timing (LILY_PROFILE=trace): %globaltimer stamps written by one thread into trace[i] ----
__device__ __forceinline__ unsigned long long globaltimer() {  // ns
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__device__ __forceinline__ void trace_at(unsigned long long* trace, int i) {
  if (!trace) return;
  trace[i] = globaltimer();
}
// Per-block stamp (LILY_PROFILE=trace-blocks): thread 0 of each block writes bt[blockIdx.x * slots + i] (b < nb).
__device__ __forceinline__ void btrace_at(unsigned long long* bt, int nb, int slots, int i) {
  if (!bt || threadIdx.x != 0 || int(blockIdx.x) >= nb) return;
  bt[blockIdx.x * slots + i] = globaltimer();
}
// The latest of several blocks: each block's thread 0 calls it once (slot starts zeroed; the last step's max stays).
__device__ __forceinline__ void trace_max(unsigned long long* trace, int i) {
  if (!trace) return;
  atomicMax(trace + i, globaltimer());
}

// ---- grid sizing: blocks of `kern` that fit on the device at once (one wave; more blocks would run a second
// wave after the first drains). Cached per (kernel, dynamic smem). ----
inline int device_sms() {
  static const int n = [] {
    int dev = 0, v = 0;
    LILY_CUDA_CHECK(cudaGetDevice(&dev));
    LILY_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}
template <typename K>
int resident_grid(K kern, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, size_t>, int> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(reinterpret_cast<const void*>(kern), smem);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int n = 0;
  LILY_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, threads, smem));
  const int g = device_sms() * (n > 0 ? n : 1);
  cache[key] = g;
  return g;
}

// Raises `kern`'s dynamic shared memory limit to at least `bytes` (once per kernel; the kernels of one launcher
// share a C++ type, so a per-lambda static flag would cover only the first instantiation launched).
template <typename K>
void allow_smem(K kern, size_t bytes) {
  static std::mutex mu;
  static std::map<const void*, size_t> done;
  const std::lock_guard<std::mutex> lock(mu);
  size_t& cur = done[reinterpret_cast<const void*>(kern)];
  if (bytes <= cur) return;
  LILY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  cur = bytes;
}

// ---- loads: weights (ldg_weight, with its L2 policies) in cuda/weight_loads.cuh ----
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned* p) {  // gpu-scope acquire (flags, counters)
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// One block past a spin wait on *waited: counts itself on *seen; the last of n resets both (so that the next launch
// starts from zero; it counts only after this one completed). Called by one thread of the block.
__device__ __forceinline__ void count_past(unsigned* waited, unsigned* seen, unsigned n) {
  if (atomicAdd(seen, 1u) == n - 1u) {
    *waited = 0;
    *seen = 0;
  }
}
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

// ---- cp.async (sm_80+): weights that do not depend on the previous kernel staged into shared memory before
// pdl_wait, so their latency overlaps the wait and the x prologue ----
__device__ __forceinline__ void cp_async16(void* smem, const void* g) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}
__device__ __forceinline__ void cp_async4(void* smem, const void* g) {  // 4 bytes (through L1: .ca)
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(g) : "memory");
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
__device__ __forceinline__ float h2f_u16(uint32_t h) {  // the fp16 in the low 16 bits of h as f32 (exact)
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(uint16_t(h)));
  return f;
}
// The (scale, bias) of an affine group from its sb word: a bf16 pair (kQ4, kQ8), an fp16 pair (kQ4H, kQ8H), or for kQ4Z
// the f32 scale with the zero z in its 4 lowest mantissa bits (bias = -z * scale).
template <int FMT> __device__ __forceinline__ float sb_scale(uint32_t sb) {
  if constexpr (FMT == kQ4Z) return __uint_as_float(sb & ~0xfu);
  else if constexpr (FMT == kQ4H || FMT == kQ8H) return h2f_u16(sb & 0xffffu);
  else return bf_lo(sb);
}
template <int FMT> __device__ __forceinline__ float sb_bias(uint32_t sb) {
  if constexpr (FMT == kQ4Z) return -float(sb & 0xfu) * __uint_as_float(sb & ~0xfu);
  else if constexpr (FMT == kQ4H || FMT == kQ8H) return h2f_u16(sb >> 16);
  else return bf_hi(sb);
}
__device__ __forceinline__ uint16_t f2bf(float f) {  // round to nearest even
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
// The KV cache's element: fp16 (an 11-bit significand, 8x finer than bf16: the bf16 cache's rounding was the whole of
// the device's logit error on the fidelity fixtures), rounded to nearest and saturated at +-65504 (post-norm K and
// V sit far below). kv2f2: the two elements of a 32-bit word (low half first).
__device__ __forceinline__ uint16_t f2kv(float f) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(0.f), "f"(f));
  return uint16_t(r & 0xffffu);
}
__device__ __forceinline__ float kv2f(uint16_t h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
__device__ __forceinline__ void kv2f2(uint32_t v, float& lo, float& hi) {
  lo = kv2f(uint16_t(v & 0xffffu));
  hi = kv2f(uint16_t(v >> 16));
}

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

// ---- activation vectors in shared memory, one x per block ----
// Two representations (the policy X of load_x and of the dot helpers below):
//  XF: f32, swizzled (swz), plus per-16-element sums xsum16. Exact; every format.
//  XQ: 4-bit and kQ6 weights (whose code words follow the same order), for the dp4a path: x per 32-element chunk c as d[c] * (254*xh + xl) with xh, xl int8 in
//      [-127, 127] (xh = round(x/dx), dx = max|x|/127 over the chunk; xl = round((x - xh*dx) * 254/dx); d = dx/254),
//      so each element carries <= max|x|/64516 absolute error (~16 bits); exact f32 chunk sums xs32 for the bias.
//      The 16 bytes of piece p (elements 16p .. 16p+15) of chunk c sit at xh[p*nch + c] (lanes reading consecutive
//      chunks hit consecutive 16-byte slots: no bank conflicts) in nibble order: word 0 = elements 0,2,4,6,
//      word 1 = 1,3,5,7, word 2 = 8,10,12,14, word 3 = 9,11,13,15, matching (w & 0x0f0f0f0f) and
//      ((w >> 4) & 0x0f0f0f0f) of the packed weight words.
struct XF {
  float* xs;
  float* xsum16;
  static constexpr bool kPairs = false;  // put() may be called by any subset of threads
  static size_t __host__ __device__ bytes(int n) { return size_t(n) * 4 + size_t(n / 16) * 4; }
  __device__ XF() {}  // placed later (arrays of forms, one per row)
  __device__ XF(void* base, int n) : xs(static_cast<float*>(base)), xsum16(xs + n) {}
  __device__ XF(float* xs_, float* xsum16_) : xs(xs_), xsum16(xsum16_) {}
  // elements 16g .. 16g+15 = v[0..3]; float4 slot j of chunk c32 = g/2 is (g%2)*4 + i
  __device__ __forceinline__ void put(int g, bool valid, const float4 (&v)[4]) {
    if (!valid) return;
    const int c32 = g >> 1, j0 = (g & 1) * 4;
    float* base = xs + (c32 << 5);
#pragma unroll
    for (int i = 0; i < 4; ++i) *reinterpret_cast<float4*>(base + (((j0 + i) ^ (c32 & 7)) << 2)) = v[i];
    xsum16[g] = ((v[0].x + v[0].y) + (v[0].z + v[0].w)) + ((v[1].x + v[1].y) + (v[1].z + v[1].w)) +
                ((v[2].x + v[2].y) + (v[2].z + v[2].w)) + ((v[3].x + v[3].y) + (v[3].z + v[3].w));
  }
  template <int FMT>
  __device__ __forceinline__ float dot(uint4 raw, uint32_t sb, int xc) const;
  // elements e0 .. e0+7 (e0 % 8 == 0) as f32
  __device__ __forceinline__ void val8(int e0, float (&o)[8]) const {
    const int c32 = e0 >> 5, j0 = (e0 & 31) >> 2;
    const float* base = xs + (c32 << 5);
    const float4 a = *reinterpret_cast<const float4*>(base + ((j0 ^ (c32 & 7)) << 2));
    const float4 b = *reinterpret_cast<const float4*>(base + (((j0 + 1) ^ (c32 & 7)) << 2));
    o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
    o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
  }
};

// A signed byte k of w (k constant) as f32 without the conversion pipe: (w ^ 0x80808080)'s byte k is s + 128, placed
// in the low mantissa of 2^23, minus 2^23 + 128 (exact).
__device__ __forceinline__ float sbyte_f(uint32_t w_x80, int k) {
  return __int_as_float(int(__byte_perm(w_x80, 0x4B000000u, 0x7440u | unsigned(k)))) - 8388736.f;
}

// Rounding to the nearest integer (ties to even, as rintf) of |p| < 2^22 on the FMA pipe: p + 1.5 * 2^23 has the
// integer in its low mantissa bits (low byte = the integer's two's-complement low byte), and minus the bias is the
// rounded value. rintf and the float -> int conversions run on the conversion pipe at 16 per clock per SM, which made
// them the bound of the quantisation (4 per element).
constexpr float kRoundBias = 12582912.f;
__device__ __forceinline__ float round_biased(float p) { return __fadd_rn(p, kRoundBias); }

// The int8 hi + lo codes of one 32-element chunk with max |x| = amax: x ~ (hi + lo / 254) * dx with dx = amax / 127;
// code() leaves them in the low bytes of h and l (round_biased), scale() is the chunk's stored d. Shared by XQ::put
// and xq_put_chunk so that an XQ image equals the form its consumer would build.
struct XqCodes {
  float dx, inv, inv2;
  __device__ __forceinline__ explicit XqCodes(float amax) : dx(amax * (1.f / 127.f)) {
    const float ra = amax > 0.f ? 1.f / amax : 0.f;  // one division
    inv = 127.f * ra;
    inv2 = 32258.f * ra;
  }
  __device__ __forceinline__ void code(float v, uint32_t& h, uint32_t& l) const {
    const float hb = round_biased(v * inv), hv = hb - kRoundBias;
    h = __float_as_uint(hb);
    // |v - hv dx| <= dx / 2 up to a few ulps, so |l| <= 127 without a clamp
    l = __float_as_uint(round_biased(fmaf(-hv, dx, v) * inv2));
  }
  __device__ __forceinline__ float scale() const { return dx * (1.f / 254.f); }
};

struct XqChunk;  // one chunk's operands (below)
struct XQ {
  int4* xh;
  int4* xl;
  float* d;
  float* xs32;
  int nch;
  static constexpr bool kPairs = true;  // put() shuffles between the two threads of a chunk: all lanes call it
  static size_t __host__ __device__ bytes(int n) { return size_t(n) * 2 + size_t(n / 32) * 8; }
  __device__ XQ() {}  // placed later (arrays of forms, one per row)
  __device__ XQ(void* base, int n)
      : xh(static_cast<int4*>(base)), xl(xh + n / 16), d(reinterpret_cast<float*>(xl + n / 16)), xs32(d + n / 32),
        nch(n / 32) {}
  __device__ __forceinline__ void put(int g, bool valid, const float4 (&v)[4]) {
    float f[16];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[4 * i] = valid ? v[i].x : 0.f;
      f[4 * i + 1] = valid ? v[i].y : 0.f;
      f[4 * i + 2] = valid ? v[i].z : 0.f;
      f[4 * i + 3] = valid ? v[i].w : 0.f;
    }
    float amax = 0.f, sum = 0.f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      amax = fmaxf(amax, fabsf(f[i]));
      sum += f[i];
    }
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));  // the chunk's other half (g ^ 1)
    const float osum = __shfl_xor_sync(0xffffffffu, sum, 1);
    if (!valid) return;
    const XqCodes q(amax);
    uint32_t h[16], l[16];  // low bytes: the codes
#pragma unroll
    for (int i = 0; i < 16; ++i) q.code(f[i], h[i], l[i]);
    auto pk = [](const uint32_t* t, int o) {  // the low bytes of t[o], t[o+2], t[o+4], t[o+6]
      return int(__byte_perm(__byte_perm(t[o], t[o + 2], 0x0040), __byte_perm(t[o + 4], t[o + 6], 0x0040), 0x5410));
    };
    const int c = g >> 1, slot = (g & 1) * nch + c;
    xh[slot] = make_int4(pk(h, 0), pk(h, 1), pk(h, 8), pk(h, 9));
    xl[slot] = make_int4(pk(l, 0), pk(l, 1), pk(l, 8), pk(l, 9));
    if ((g & 1) == 0) {
      d[c] = q.scale();
      xs32[c] = sum + osum;
    }
  }
  template <int FMT>
  __device__ __forceinline__ float dot(uint4 raw, uint32_t sb, int xc) const;
  __device__ __forceinline__ XqChunk chunk(int xc) const;  // chunk xc's operands (below)
  // elements e0 .. e0+7 (e0 % 8 == 0) as f32, d * (254 hi + lo): half h8 of piece p of chunk c holds them in two
  // words, the even elements in word 2 h8, the odd ones in word 2 h8 + 1 (nibble order above)
  __device__ __forceinline__ void val8(int e0, float (&o)[8]) const {
    const int c = e0 >> 5, p = (e0 >> 4) & 1, h8 = (e0 >> 3) & 1;
    const int2 hw = reinterpret_cast<const int2*>(xh + p * nch + c)[h8];
    const int2 lw = reinterpret_cast<const int2*>(xl + p * nch + c)[h8];
    const float dc = d[c];
    const uint32_t he = uint32_t(hw.x) ^ 0x80808080u, ho = uint32_t(hw.y) ^ 0x80808080u;
    const uint32_t le = uint32_t(lw.x) ^ 0x80808080u, lo = uint32_t(lw.y) ^ 0x80808080u;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      o[2 * k] = dc * fmaf(254.f, sbyte_f(he, k), sbyte_f(le, k));
      o[2 * k + 1] = dc * fmaf(254.f, sbyte_f(ho, k), sbyte_f(lo, k));
    }
  }
};

// The XQ form in global memory (an "XQ image", xq_image_bytes(n) in kernels.h): the shared-memory layout of XQ,
// written by the producer of x so that its consumer copies it instead of quantising. xq_put_chunk: one warp writes
// chunk c (elements 32c .. 32c+31, lane e holding element 32c+e) with the formulas of XQ::put.
__device__ __forceinline__ void xq_put_chunk(void* img, int n, int c, float v, int lane) {
  const float amax = warp_max(fabsf(v)), sum = warp_sum(v);
  const XqCodes q(amax);
  uint32_t h, l;
  q.code(v, h, l);
  // byte of element e in piece p = e / 16 (XQ's nibble order): word ((e % 16) / 8) * 2 + e % 2, byte (e % 8) / 2
  const int e = lane & 15, slot = (lane >> 4) * (n / 32) + c;
  const int off = slot * 16 + (((e >> 3) << 1) | (e & 1)) * 4 + ((e & 7) >> 1);
  int8_t* xh = static_cast<int8_t*>(img);
  xh[off] = int8_t(h);
  xh[n + off] = int8_t(l);
  if (lane == 0) {
    float* d = reinterpret_cast<float*>(xh + 2 * n);
    d[c] = q.scale();
    d[n / 32 + c] = sum;
  }
}

// HeadNorm (kernels.h): the sum of the partial sums of squares of 16-element group g's head, all loads in flight at
// once (parts <= kHeadNormMaxParts, host-checked).
__device__ __forceinline__ float head_sum(const HeadNorm& hn, int g) {
  float t[kHeadNormMaxParts];
#pragma unroll
  for (int q = 0; q < kHeadNormMaxParts; ++q) t[q] = q < hn.parts ? hn.ss[(g * 16 / hn.dim) * hn.parts + q] : 0.f;
  float s = 0.f;
#pragma unroll
  for (int q = 0; q < kHeadNormMaxParts; ++q) s += t[q];
  return s;
}

// Loads x[0..n) into the representation `out`, times rsqrt(mean(x^2)+eps)*norm_w when norm_w != null.
// red: 32 floats of scratch. Ends with __syncthreads(). Each thread owns whole 16-element groups; its x loads
// (float4) are all issued before any is used. Requires n % 32 == 0; XQ also n <= 32 * blockDim.x (host-checked).
// norm_w may point to global or (staged by stage_vec) shared memory.
// out2 (optional, f32 form): the same values also written there, from the same loads and norm.
// hn (optional: hn.ss != null, with norm_w == null): per-head scale (HeadNorm in kernels.h), its sums loaded with x.
// tr (optional, LILY_PROFILE=trace): stamps when this thread's x loads have landed (tr[0]) and the norm is reduced (tr[1]).
// r_out (optional): receives the RMS factor rsqrt(mean(x^2)+eps) (1 without norm_w), in every thread.
// raw2: out2 receives x as loaded (no norm, no head scale), times w2 when given (global or staged like norm_w).
// keep_last: the thread's last cp.async group is not waited for (copies committed after stage_vec's).
template <class X>
__device__ __forceinline__ void load_x(const float* __restrict__ x, const float* __restrict__ norm_w, float eps,
                                       int n, X& out, float* red, XF* out2 = nullptr, HeadNorm hn = {},
                                       unsigned long long* tr = nullptr, float* r_out = nullptr,
                                       bool raw2 = false, const float* w2 = nullptr, bool keep_last = false) {
  constexpr int kMaxG = 2;  // groups of x held in registers per thread (longer x: plain loop below)
  const int ng = n / 16;
  float4 v[kMaxG][4];
  float hr[kMaxG];  // hn: the group's head sum of squares, then its scale
#pragma unroll
  for (int k = 0; k < kMaxG; ++k) {
    const int g = threadIdx.x + k * blockDim.x;
    hr[k] = 0.f;
    if (g < ng) {
      const float4* xp = reinterpret_cast<const float4*>(x) + g * 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) v[k][i] = xp[i];
      if (hn.ss) hr[k] = head_sum(hn, g);
    }
  }
  if (hn.ss)
#pragma unroll
    for (int k = 0; k < kMaxG; ++k) hr[k] = rsqrtf(hr[k] / float(hn.dim) + hn.eps);
  float r = 1.f;
  if (tr) {  // a use of the loaded values orders the stamp after their arrival
    float t = 0.f;
#pragma unroll
    for (int k = 0; k < kMaxG; ++k)
      if (threadIdx.x + k * blockDim.x < unsigned(ng)) t += v[k][0].x + v[k][3].w;  // this thread's groups only
    if (t != 12345.f) trace_at(tr, 0);
  }
  if (w2 && !norm_w) {  // w2 may be staged (stage_vec): wait for it and publish it
    cp_async_wait_all();
    __syncthreads();
  }
  if (norm_w) {
    if (keep_last) asm volatile("cp.async.wait_group 1;" ::: "memory");
    else cp_async_wait_all();  // norm_w (and w2) may be staged (stage_vec); block_sum's barrier publishes them
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
    if (tr && r != 12345.f) trace_at(tr, 1);
  }
  if (r_out) *r_out = r;
  auto scale = [&](float4 a, float4 b) {
    return norm_w ? make_float4(a.x * r * b.x, a.y * r * b.y, a.z * r * b.z, a.w * r * b.w) : a;
  };
  auto times_w2 = [&](float4 (&b)[4], int g) {  // raw2: group g of x times w2
    const float4* wp = reinterpret_cast<const float4*>(w2) + g * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 t = wp[i];
      b[i] = make_float4(b[i].x * t.x, b[i].y * t.y, b[i].z * t.z, b[i].w * t.w);
    }
  };
#pragma unroll
  for (int k = 0; k < kMaxG; ++k) {
    const int g = threadIdx.x + k * blockDim.x;
    const bool valid = g < ng;
    if (!X::kPairs && !valid) continue;
    if (X::kPairs && k * blockDim.x >= unsigned(ng)) break;  // uniform over the block
    float4 a[4] = {};
    if (valid) {
      float4 w[4] = {};
      if (norm_w) {
        const float4* wp = reinterpret_cast<const float4*>(norm_w) + g * 4;
#pragma unroll
        for (int i = 0; i < 4; ++i) w[i] = wp[i];  // shared (staged) or global
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = scale(v[k][i], w[i]);
      if (hn.ss)
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = make_float4(a[i].x * hr[k], a[i].y * hr[k], a[i].z * hr[k], a[i].w * hr[k]);
    }
    out.put(g, valid, a);
    if (out2) {
      float4 b[4];  // selected element by element (a runtime choice between whole arrays puts them on the stack)
#pragma unroll
      for (int i = 0; i < 4; ++i) b[i] = raw2 ? v[k][i] : a[i];
      if (raw2 && w2 && valid) times_w2(b, g);
      out2->put(g, valid, b);
    }
  }
  if constexpr (!X::kPairs) {
    for (int g = threadIdx.x + kMaxG * blockDim.x; g < ng; g += blockDim.x) {
      const float4* xp = reinterpret_cast<const float4*>(x) + g * 4;
      const float4* wp = reinterpret_cast<const float4*>(norm_w) + g * 4;
      float4 a[4];
      for (int i = 0; i < 4; ++i) a[i] = norm_w ? scale(xp[i], wp[i]) : xp[i];
      if (hn.ss) {
        const float h = rsqrtf(head_sum(hn, g) / float(hn.dim) + hn.eps);
        for (int i = 0; i < 4; ++i) a[i] = make_float4(a[i].x * h, a[i].y * h, a[i].z * h, a[i].w * h);
      }
      out.put(g, true, a);
      if (out2 && raw2) {
        float4 xr[4] = {xp[0], xp[1], xp[2], xp[3]};
        if (w2) times_w2(xr, g);
        out2->put(g, true, xr);
      } else if (out2) {
        out2->put(g, true, a);
      }
    }
  }
  __syncthreads();
}
// x given as an XQ image (xq_put_chunk) of n elements: copied into `out`; with hn.ss, chunk c's scale and sum times
// its head's factor rsqrt(sum of hn's partial sums / dim + eps) (the producer quantised x without it). All of a
// thread's loads are issued before its first store (one L2 round trip). Needs n <= 8 * kMax * blockDim.x (8192 at
// 256 threads: use_int8_x's limit). Ends with __syncthreads().
__device__ __forceinline__ void load_xq_image(const void* img, int n, XQ& out, const HeadNorm& hn) {
  constexpr int kMax = 4;
  const int4* src = static_cast<const int4*>(img);  // through L2 only (__ldcg): the L1 may hold an older image
  const float* ds = reinterpret_cast<const float*>(src + n / 8);
  int4 v[kMax];  // xh then xl: n / 16 int4 each
#pragma unroll
  for (int k = 0; k < kMax; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n / 8) v[k] = __ldcg(src + i);
  }
  const int c = threadIdx.x;  // chunk (n / 32 <= blockDim.x)
  float d = 0.f, s = 0.f, r = 1.f;
  if (c < n / 32) {
    d = __ldcg(ds + c);
    s = __ldcg(ds + n / 32 + c);
    if (hn.ss) r = rsqrtf(head_sum(hn, 2 * c) / float(hn.dim) + hn.eps);
  }
#pragma unroll
  for (int k = 0; k < kMax; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i < n / 8) out.xh[i] = v[k];  // xl follows xh in XQ
  }
  if (c < n / 32) {
    out.d[c] = d * r;
    out.xs32[c] = s * r;
  }
  __syncthreads();
}
// The f32 form used by kernels that keep raw pointers (xs: n floats, xsum16: n/16 floats).
__device__ __forceinline__ void load_x(const float* __restrict__ x, const float* __restrict__ norm_w, float eps,
                                       int n, float* xs, float* xsum16, float* red) {
  XF o(xs, xsum16);
  load_x(x, norm_w, eps, n, o, red);
}

// ---- per-chunk dot products: one 16-byte piece of a weight row against the matching x ----
// Elements per 16-byte chunk for each format.
template <int FMT> struct FmtInfo;
template <> struct FmtInfo<kQ4> { static constexpr int kElems = 32; };
template <> struct FmtInfo<kQ4Z> { static constexpr int kElems = 32; };
template <> struct FmtInfo<kQ4H> { static constexpr int kElems = 32; };
template <> struct FmtInfo<kQ8> { static constexpr int kElems = 16; };
template <> struct FmtInfo<kQ8H> { static constexpr int kElems = 16; };
template <> struct FmtInfo<kBF16> { static constexpr int kElems = 8; };
template <> struct FmtInfo<kF8> { static constexpr int kElems = 16; };
template <> struct FmtInfo<kI8> { static constexpr int kElems = 16; };
template <> struct FmtInfo<kQ6> { static constexpr int kElems = 16; };

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

// 4-bit chunk (kQ4, kQ4Z or kQ4H: they differ in the sb word only).
template <int FMT>
__device__ __forceinline__ float chunk_dot_q4(uint4 raw, uint32_t sb, const float* xs, const float* xsum16, int xc) {
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
  const float s16 = 16.f * sb_scale<FMT>(sb), b = sb_bias<FMT>(sb);
  const float xsum = xsum16[2 * xc] + xsum16[2 * xc + 1];
  return fmaf(s16, a0 + a1, (b - s16) * xsum);
}

// 8-bit chunk (kQ8 or kQ8H: they differ in the sb word only).
template <int FMT>
__device__ __forceinline__ float chunk_dot_q8(uint4 raw, uint32_t sb, const float* xs, const float* xsum16, int xc) {
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
  const float s256 = 256.f * sb_scale<FMT>(sb), b = sb_bias<FMT>(sb);
  return fmaf(s256, a0 + a1, (b - s256) * xsum16[xc]);
}
// The affine formats' chunk dot (the others are specialised below and in code8.cuh / q6_chunk.cuh).
template <int FMT>
__device__ __forceinline__ float chunk_dot(uint4 raw, uint32_t sb, const float* xs, const float* xsum16, int xc) {
  static_assert(fmt_q4(FMT) || fmt_q8(FMT), "chunk_dot: a format without a chunk dot");
  if constexpr (fmt_q4(FMT)) return chunk_dot_q4<FMT>(raw, sb, xs, xsum16, xc);
  else return chunk_dot_q8<FMT>(raw, sb, xs, xsum16, xc);
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

// One 4-bit chunk's codes as the dp4a operands w[k] (the nibble planes: w[2i] = low nibbles of word i, w[2i + 1] =
// high) with its group's scale and bias (kQ4, kQ4Z or kQ4H: they differ in the sb word only). Unpacked once, it is
// dotted with several rows' x (a verify's rows) by dot() below.
struct Q4Codes {
  int w[8];
  float s, b;
  template <int FMT>
  __device__ __forceinline__ static Q4Codes of(uint4 raw, uint32_t sb) {
    constexpr uint32_t m = 0x0f0f0f0fu;
    Q4Codes c;
    c.w[0] = int(raw.x & m), c.w[1] = int((raw.x >> 4) & m), c.w[2] = int(raw.y & m), c.w[3] = int((raw.y >> 4) & m);
    c.w[4] = int(raw.z & m), c.w[5] = int((raw.z >> 4) & m), c.w[6] = int(raw.w & m), c.w[7] = int((raw.w >> 4) & m);
    c.s = sb_scale<FMT>(sb);
    c.b = sb_bias<FMT>(sb);
    return c;
  }
};
// One chunk of an XQ x (loaded once, dotted with several weight rows): hi / lo codes, scale d and Sum(x).
struct XqChunk {
  int4 h0, h1, l0, l1;
  float d, xs;
};
// The chunk's dot: 16 dp4a (two exact int32 sums, 254*hi + lo < 2^24 so the float conversion is exact), then
// s * Sum(q x) + b * Sum(x).
__device__ __forceinline__ float q4i8_dot(const Q4Codes& c, const XqChunk& x) {
  int sh = __dp4a(c.w[0], x.h0.x, 0), sl = __dp4a(c.w[0], x.l0.x, 0);
  sh = __dp4a(c.w[1], x.h0.y, sh);
  sl = __dp4a(c.w[1], x.l0.y, sl);
  sh = __dp4a(c.w[2], x.h0.z, sh);
  sl = __dp4a(c.w[2], x.l0.z, sl);
  sh = __dp4a(c.w[3], x.h0.w, sh);
  sl = __dp4a(c.w[3], x.l0.w, sl);
  sh = __dp4a(c.w[4], x.h1.x, sh);
  sl = __dp4a(c.w[4], x.l1.x, sl);
  sh = __dp4a(c.w[5], x.h1.y, sh);
  sl = __dp4a(c.w[5], x.l1.y, sl);
  sh = __dp4a(c.w[6], x.h1.z, sh);
  sl = __dp4a(c.w[6], x.l1.z, sl);
  sh = __dp4a(c.w[7], x.h1.w, sh);
  sl = __dp4a(c.w[7], x.l1.w, sl);
  const float sxq = float(sh * 254 + sl) * x.d;  // Sum(q x) over the chunk
  return fmaf(c.s, sxq, c.b * x.xs);
}
__device__ __forceinline__ XqChunk XQ::chunk(int xc) const {
  return XqChunk{xh[xc], xh[nch + xc], xl[xc], xl[nch + xc], d[xc], xs32[xc]};
}
// 4-bit chunk against XQ (kQ4, kQ4Z or kQ4H: s * Sum(q x) + b * Sum(x) with the group's scale and bias)
template <int FMT>
__device__ __forceinline__ float chunk_dot_q4i8(uint4 raw, uint32_t sb, const XQ& q, int xc) {
  return q4i8_dot(Q4Codes::of<FMT>(raw, sb), q.chunk(xc));
}
template <int FMT>
__device__ __forceinline__ float XF::dot(uint4 raw, uint32_t sb, int xc) const {
  return chunk_dot<FMT>(raw, sb, xs, xsum16, xc);
}
template <int FMT>
__device__ __forceinline__ float XQ::dot(uint4 raw, uint32_t sb, int xc) const {
  static_assert(fmt_q4(FMT), "XQ serves 4-bit weights (and kQ6: q6_chunk.cuh)");
  return chunk_dot_q4i8<FMT>(raw, sb, *this, xc);
}

// The index of chunk c's sb word within its row (dmat_set_group: a shift for the power-of-two group sizes).
template <int FMT>
__device__ __forceinline__ int chunk_group(const DMat& m, int c) {
  return m.gshift >= 0 ? c >> m.gshift : (c * FmtInfo<FMT>::kElems) / m.group;
}
// Loads of chunk c of row `row` of m: the 16 bytes and the (scale, bias) word of its group (0 without sb words).
template <int FMT>
__device__ __forceinline__ void chunk_load(const DMat& m, int64_t row, int c, uint4& raw, uint32_t& sb) {
  raw = ldg_weight(m.w + row * m.row_bytes + int64_t(c) * 16);
  if constexpr (fmt_sb(FMT)) {
    sb = ldg_weight_u32(m.sb + row * m.sb_row + chunk_group<FMT>(m, c));
  } else {
    sb = 0;
  }
}

}  // namespace lily::cuda

#include "cuda/common/row_dots.cuh"  // a warp's dots of whole weight rows (row_dot_lane, row_dot2_lane, RowSet)
#include "cuda/common/q6_chunk.cuh"  // kQ6 (GGUF Q6_K): the chunk dot and the chunk's element reader
#include "cuda/common/code8.cuh"     // the 8-bit-code formats (kF8, kI8): chunk dots; every format's element reader
