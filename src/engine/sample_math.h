// The scalar pieces of the step sampler (engine/step_sampler.h) shared bit for bit by the host reference and the
// GPU kernels (src/cuda/decode/sampler.cu): the counter-based RNG, the order-preserving key of a logit, and the
// fixed-point probability weight. Plain C++ that nvcc also compiles as __host__ __device__.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LILY_HD __host__ __device__ __forceinline__
#else
#define LILY_HD inline
#endif

namespace lily::samp {

// 32 x 32 -> 64-bit product split into (hi, lo) words.
LILY_HD void mul32(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  const uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// Philox4x32 with 10 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): key = seed,
// counter = (counter lo, counter hi, 0, 0). Returns the first two output words as one 64-bit number: a
// pure function of (seed, counter), so a draw depends only on the seed and the step index.
LILY_HD uint64_t philox64(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint32_t hi0, lo0, hi1, lo1;
    mul32(0xD2511F53u, c0, hi0, lo0);
    mul32(0xCD9E8D57u, c2, hi1, lo1);
    const uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return (uint64_t(c1) << 32) | c0;
}

// Monotone map float -> uint32 (a < b  <=>  key(a) < key(b) for non-NaN floats; -0 < +0).
LILY_HD uint32_t key_of(float v) {
  uint32_t u;
#if defined(__CUDA_ARCH__)
  u = __float_as_uint(v);
#else
  __builtin_memcpy(&u, &v, 4);
#endif
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Probability weight of an adjusted logit a at temperature 1/inv_temp relative to the maximum mx, in fixed point
// (2^32 = probability of the most likely token): integer sums are exact in any order, so the GPU's parallel
// reductions equal the host's sequential ones. Weights below 2^-32 of the top token's are 0 (never drawn).
// exp(d) for d <= 0 with the same bits on the host and the GPU (library expf differs in the last bit between the
// two, which moved a CDF boundary in 1 of 800 draws): range reduction and a degree-7 polynomial in explicit fmaf
// (correctly rounded on both), 2^n applied through the exponent bits. ~2 ulp; results below 2^-40 are 0 (their
// fixed-point weight is 0 anyway); NaN -> 0.
LILY_HD float exp_nonpos(float d) {
  if (!(d > -27.7f)) return 0.f;  // e^-27.7 < 2^-39.9
  const float n = rintf(d * 1.44269504f);
  float r = fmaf(-n, 0.693145752f, d);  // ln 2 split in a high part with trailing zeros and a low part
  r = fmaf(-n, 1.42860677e-06f, r);
  float p = 1.98412698e-4f;
  p = fmaf(p, r, 1.38888889e-3f);
  p = fmaf(p, r, 8.33333333e-3f);
  p = fmaf(p, r, 4.16666667e-2f);
  p = fmaf(p, r, 1.66666667e-1f);
  p = fmaf(p, r, 0.5f);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const uint32_t eb = uint32_t(127 + int(n)) << 23;  // 2^n, n in [-40, 0]: a normal float
  float scale;
#if defined(__CUDA_ARCH__)
  scale = __uint_as_float(eb);
#else
  __builtin_memcpy(&scale, &eb, 4);
#endif
  return p * scale;
}

LILY_HD uint64_t weight_of(float a, float mx, float inv_temp) {
  const float d = (a - mx) * inv_temp;
  const float w = exp_nonpos(d);
  return uint64_t(w * 4294967296.0f);
}

// floor(z * r / 2^64): the draw target in [0, z) from 64 random bits r.
LILY_HD uint64_t scale_draw(uint64_t z, uint64_t r) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(z, r);
#else
  return uint64_t((static_cast<unsigned __int128>(z) * r) >> 64);
#endif
}

}  // namespace lily::samp

namespace lily::samp {

// One request's sampling parameters in the form the step sampler uses (a plain struct the GPU copies).
struct StepParams {
  float temperature = 1.0f;
  float inv_temp = 1.0f;
  float top_p = 1.0f;             // < 1: nucleus filter on
  float log_min_p = -INFINITY;    // log(min_p), -inf: off (computed on the host: one value for both sides)
  int top_k = 0;                  // 0: off (else 1 < top_k < vocab)
  int greedy = 0;                 // temperature <= 0 or top_k == 1: argmax of the adjusted logits
  int use_rep = 0, use_pf = 0;    // repetition / presence+frequency penalties on
  float repetition = 1.0f, presence = 0.0f, frequency = 0.0f;
  uint64_t seed = 0;
};

constexpr uint32_t kPromptBit = 0x80000000u;  // token-table entry: bit 31 = in the prompt, low bits = times generated

// Logit after the penalties (same formulas as Sampler::adjust); NaN -> -inf. Multiply and add rounded
// separately on the GPU too (no fused multiply-add), as on the host.
LILY_HD float adjust_logit(float l, uint32_t tab, const StepParams& p) {
  if (p.use_rep && tab != 0) {
#if defined(__CUDA_ARCH__)
    l = l > 0 ? __fdiv_rn(l, p.repetition) : __fmul_rn(l, p.repetition);
#else
    l = l > 0 ? l / p.repetition : l * p.repetition;
#endif
  }
  const uint32_t cnt = tab & ~kPromptBit;
  if (p.use_pf && cnt) {
#if defined(__CUDA_ARCH__)
    l = __fsub_rn(l, __fadd_rn(p.presence, __fmul_rn(p.frequency, float(cnt))));
#else
    const float f = p.frequency * float(cnt);
    l -= p.presence + f;
#endif
  }
  return l != l ? -INFINITY : l;
}

// min-p as a logit threshold: w >= min_p  <=>  a >= mx + T log(min_p).
LILY_HD float min_p_threshold(float mx, const StepParams& p) {
  if (!(p.log_min_p > -INFINITY)) return -INFINITY;
#if defined(__CUDA_ARCH__)
  return __fadd_rn(mx, __fmul_rn(p.temperature, p.log_min_p));
#else
  const float t = p.temperature * p.log_min_p;
  return mx + t;
#endif
}

// Mass the nucleus must reach: max(1, floor(top_p * Z)).
LILY_HD uint64_t top_p_target(float top_p, uint64_t z) {
  const uint64_t P = uint64_t(double(top_p) * double(z));
  return P > 0 ? P : 1;
}

}  // namespace lily::samp
