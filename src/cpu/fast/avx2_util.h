// Helpers shared by the AVX2 kernels (x86-64 only; include after <immintrin.h>).
#pragma once
#if defined(__x86_64__)
#include <immintrin.h>

#define LILY_AVX2 __attribute__((target("avx2,fma")))

namespace lily::fast {

// Σ of 16 floats held as [lo | hi], in the order of GCC's _mm512_reduce_add_ps on the 512-bit register
// [lo | hi] (halves, then 128-bit halves, then lanes {0,1} + {2,3}, then lane 0 + lane 1), so that the AVX2
// kernels' horizontal sums round exactly as the AVX-512 kernels' do.
LILY_AVX2 inline float reduce_add16_avx2(__m256 lo, __m256 hi) {
  const __m256 t3 = _mm256_add_ps(hi, lo);
  const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
  const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

}  // namespace lily::fast
#endif
