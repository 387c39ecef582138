// AVX2 + FMA version of q8_bf16_avx512.cpp (8-bit affine, dense bf16 and dense f32 matrices, f32 activations). The
// AVX-512 kernel's two 16-lane accumulators are four 8-lane ones here, updated with the same operations lane by
// lane and summed in the same order, so the results are bit-identical to it.
#if defined(__x86_64__)
#include <immintrin.h>

#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/avx2_util.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

LILY_AVX2 void q8_bf16_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y) {
  const int64_t cols = W.cols;
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * rb;
    for (int i = 0; i < n; ++i) {
      const float* x = X + static_cast<size_t>(i) * cols;
      __m256 acc[2][2] = {{_mm256_setzero_ps(), _mm256_setzero_ps()}, {_mm256_setzero_ps(), _mm256_setzero_ps()}};
      if (W.kind == QMatrix::Kind::Affine) {
        const int G = static_cast<int>(cols / W.group);
        for (int g = 0; g < G; ++g) {
          const __m256 s = _mm256_set1_ps(scale_at(W.scales, W.sdtype, r * G + g));
          const __m256 b = _mm256_set1_ps(scale_at(W.biases, W.sdtype, r * G + g));
          for (int c = 0; c < W.group; c += 16) {
            const int64_t col = static_cast<int64_t>(g) * W.group + c;
            __m256* a = acc[(c & 16) ? 1 : 0];
            for (int h = 0; h < 2; ++h) {
              const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(wr + col + 8 * h));
              const __m256 w = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(q8)), s, b);
              a[h] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + col + 8 * h), a[h]);
            }
          }
        }
      } else if (W.dtype == DType::F32) {  // dense f32
        const float* w32 = reinterpret_cast<const float*>(wr);
        for (int64_t c = 0; c < cols; c += 16) {
          __m256* a = acc[(c & 16) ? 1 : 0];
          for (int h = 0; h < 2; ++h)
            a[h] = _mm256_fmadd_ps(_mm256_loadu_ps(w32 + c + 8 * h), _mm256_loadu_ps(x + c + 8 * h), a[h]);
        }
      } else {  // dense bf16
        const uint16_t* w16 = reinterpret_cast<const uint16_t*>(wr);
        for (int64_t c = 0; c < cols; c += 16) {
          __m256* a = acc[(c & 16) ? 1 : 0];
          for (int h = 0; h < 2; ++h) {
            const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w16 + c + 8 * h));
            const __m256 w = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
            a[h] = _mm256_fmadd_ps(w, _mm256_loadu_ps(x + c + 8 * h), a[h]);
          }
        }
      }
      Y[static_cast<size_t>(i) * W.rows + r] =
          reduce_add16_avx2(_mm256_add_ps(acc[0][0], acc[1][0]), _mm256_add_ps(acc[0][1], acc[1][1]));
    }
  }
}

}  // namespace lily::fast

#else  // not x86-64: never called

#include <cstdlib>

#include "cpu/fast/q4_kernels.h"

namespace lily::fast {
void q8_bf16_rows_avx2(const QMatrix&, int64_t, int64_t, const float*, int, float*) { std::abort(); }
}  // namespace lily::fast

#endif
