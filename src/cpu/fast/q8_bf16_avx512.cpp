// AVX-512 kernels for the matrices that are not 4-bit: MLX affine 8-bit (router, shared-expert gate), dense
// bf16 (Hugging Face checkpoints) and dense f32 (GGUF's router and shared-expert gate). Weights are decoded in registers (w = s·q + b, or bf16 << 16) and multiplied
// with the f32 activations: exact f32 arithmetic, no activation quantisation.
// GCC 12 reports false (maybe-)uninitialized warnings inside its own AVX-512 intrinsic headers.
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

bool q8_bf16_supported(const QMatrix& W) {
  if (W.kind == QMatrix::Kind::Affine) return W.bits == 8 && W.group % 16 == 0 && W.cols % W.group == 0;
  return W.kind == QMatrix::Kind::Dense && (W.dtype == DType::BF16 || W.dtype == DType::F32) && W.cols % 16 == 0;
}

}  // namespace lily::fast

#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))


LILY_AVX512 void q8_bf16_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y) {
  const int64_t cols = W.cols;
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * rb;
    for (int i = 0; i < n; ++i) {
      const float* x = X + static_cast<size_t>(i) * cols;
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
      if (W.kind == QMatrix::Kind::Affine) {
        const int G = static_cast<int>(cols / W.group);
        for (int g = 0; g < G; ++g) {
          const __m512 s = _mm512_set1_ps(scale_at(W.scales, W.sdtype, r * G + g));
          const __m512 b = _mm512_set1_ps(scale_at(W.biases, W.sdtype, r * G + g));
          for (int c = 0; c < W.group; c += 16) {
            const int64_t col = static_cast<int64_t>(g) * W.group + c;
            const __m128i q8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + col));
            const __m512 w = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(q8)), s, b);
            if (c & 16)
              acc1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + col), acc1);
            else
              acc0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + col), acc0);
          }
        }
      } else if (W.dtype == DType::F32) {  // dense f32 (GGUF's router and shared-expert gate)
        const float* w32 = reinterpret_cast<const float*>(wr);
        for (int64_t c = 0; c < cols; c += 16) {
          if (c & 16)
            acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(w32 + c), _mm512_loadu_ps(x + c), acc1);
          else
            acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(w32 + c), _mm512_loadu_ps(x + c), acc0);
        }
      } else {  // dense bf16
        const uint16_t* w16 = reinterpret_cast<const uint16_t*>(wr);
        for (int64_t c = 0; c < cols; c += 16) {
          const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w16 + c));
          const __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
          if (c & 16)
            acc1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + c), acc1);
          else
            acc0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x + c), acc0);
        }
      }
      Y[static_cast<size_t>(i) * W.rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    }
  }
}

}  // namespace lily::fast

#else  // not x86-64: never called (fast_matmul takes the generic path without AVX-512)

#include <cstdlib>

namespace lily::fast {
void q8_bf16_rows_avx512(const QMatrix&, int64_t, int64_t, const float*, int, float*) { std::abort(); }
}  // namespace lily::fast

#endif
