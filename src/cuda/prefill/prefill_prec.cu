// Operand rows of the prefill GEMMs in the selected precision (prefill.h PrefillPrec):
//  k_act_rows: one block per row; y = f32 row (optionally RMSNorm * w on the fly), m = max |y|, a power-of-two
//    scale 2^(e-15) with m in [2^(e-1), 2^e) so that |y| / scale < 2^15 (fp16 max 65504: no overflow, and the
//    row's largest element keeps the full 11-bit significand), hi = fp16(y / scale), lo = fp16(y / scale - hi)
//    (kPrecSplit; the difference is exact in f32). bf16 mode writes bf16(y) and no scale.
#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  if (lane == 0) red[w] = v;
  __syncthreads();
  float t = lane < nw ? red[lane] : 0.f;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) t = fmaxf(t, __shfl_xor_sync(0xffffffffu, t, o));
  return t;
}

// NORM: y[i] = x[i] * rsqrt(mean(x^2) + eps) * w[i]; else y = x.
template <bool NORM>
__global__ void __launch_bounds__(256) k_act_rows(const float* x, int ldx, const float* w, int K, float eps,
                                                 int prec, ActRows out) {
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * ldx;
  float r = 1.f;
  if constexpr (NORM) {
    float ss = 0.f;
    for (int i = threadIdx.x; i < K; i += blockDim.x) ss += xr[i] * xr[i];
    ss = block_sum(ss, red);
    r = rsqrtf(ss / float(K) + eps);
  }
  auto y = [&](int i) {
    if constexpr (NORM) return xr[i] * r * w[i];
    else return xr[i];
  };
  uint16_t* hi = out.hi + t * K;
  if (prec == kPrecBF16) {
    for (int i = threadIdx.x; i < K; i += blockDim.x) hi[i] = f2bf(y(i));
    return;
  }
  float m = 0.f;
  for (int i = threadIdx.x; i < K; i += blockDim.x) m = fmaxf(m, fabsf(y(i)));
  m = block_max(m, red);
  int e = 0;
  if (m > 0.f && m <= 3.4e38f) frexpf(m, &e);  // m in [2^(e-1), 2^e); e = 0 for 0, inf or NaN
  e = max(-110, min(120, e));                   // keeps scale and 1/scale normal (|y| >= 2^120: saturates)
  const float inv = ldexpf(1.f, 15 - e);
  if (threadIdx.x == 0) out.scale[t] = ldexpf(1.f, e - 15);
  uint16_t* lo = prec == kPrecSplit ? out.lo + t * K : nullptr;
  for (int i = threadIdx.x; i < K; i += blockDim.x) {
    const float v = y(i) * inv;  // exact (power of two, no under/overflow in the clamped range)
    const uint16_t h = f2h_bits(v);
    hi[i] = h;
    if (lo) lo[i] = f2h_bits(v - h2f_bits(h));
  }
}

void check_out(int prec, const ActRows& out) {
  if (!out.hi || (prec != kPrecBF16 && !out.scale) || (prec == kPrecSplit && !out.lo))
    throw Error("prefill: operand rows lack the parts of their precision");
}

}  // namespace

int parse_prefill_prec(const char* s) {
  if (!s || !*s) throw Error("LILY_CUDA_PREFILL_PRECISION: empty");
  if (std::strcmp(s, "bf16") == 0) return kPrecBF16;
  if (std::strcmp(s, "fp16") == 0) return kPrecFP16;
  if (std::strcmp(s, "split") == 0) return kPrecSplit;
  if (std::strcmp(s, "mixed") == 0) return kPrecMixed;
  throw Error(std::string("LILY_CUDA_PREFILL_PRECISION: '") + s + "' is not one of bf16, fp16, split, mixed");
}

const char* prefill_prec_name(int prec) {
  return prec == kPrecMixed ? "mixed" : prec == kPrecSplit ? "split" : prec == kPrecFP16 ? "fp16" : "bf16";
}

void prefill_rmsnorm_act(const float* x, int ldx, const float* w, int n, int H, float eps, int prec,
                         const ActRows& out, cudaStream_t s) {
  if (n <= 0) return;
  check_out(prec, out);
  k_act_rows<true><<<n, 256, 0, s>>>(x, ldx, w, H, eps, prec, out);
  LILY_CUDA_CHECK_LAUNCH();
}

void prefill_quant_rows(const float* x, int ldx, int n, int K, int prec, const ActRows& out, cudaStream_t s) {
  if (n <= 0) return;
  check_out(prec, out);
  k_act_rows<false><<<n, 256, 0, s>>>(x, ldx, nullptr, K, 0.f, prec, out);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
