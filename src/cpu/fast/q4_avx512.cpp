// 4-bit affine (MLX, group 64) matrix x activations with AVX-512 VNNI: nibbles are unpacked in registers
// and multiplied as u8 x s8 (vpdpbusd) against the quantised activations; per group
// y += scale·dx·Σ(q·xq) + bias·Σx. Two groups per 512-bit register.
#include <immintrin.h>

#include <algorithm>

#include "core/dtype.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace {

LILY_AVX512 inline float scale_at(const void* p, DType t, int64_t i) {
  if (t == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  if (t == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

template <bool PRECISE, int NB>
LILY_AVX512 void rows_block(const QMatrix& W, int64_t r, const QuantX& X, int i0, float* Y, const float* s,
                            const float* b) {
  const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * W.row_bytes();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[NB];
  for (int j = 0; j < NB; ++j) acc[j] = _mm512_setzero_ps();
  for (int p = 0; p < X.P; ++p) {
    const bool full = 2 * p + 1 < X.G;
    const __m512i wb = _mm512_maskz_loadu_epi8(full ? ~0ULL : 0xFFFFFFFFULL, wr + p * 64);
    const __m512i lo = _mm512_and_si512(wb, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wb, 4), m4);
    const __m512 sv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(s[2 * p])),
                                         _mm256_set1_ps(full ? s[2 * p + 1] : 0.0f), 1);
    for (int j = 0; j < NB; ++j) {
      const size_t pi = static_cast<size_t>(i0 + j) * X.P + p;
      const int8_t* xh = &X.hi[pi * 128];
      __m512i id = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xh));
      id = _mm512_dpbusd_epi32(id, hi, _mm512_loadu_si512(xh + 64));
      __m512 f = _mm512_cvtepi32_ps(id);
      if constexpr (PRECISE) {
        const int8_t* xl = &X.lo[pi * 128];
        __m512i il = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, _mm512_loadu_si512(xl));
        il = _mm512_dpbusd_epi32(il, hi, _mm512_loadu_si512(xl + 64));
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_set1_ps(1.0f / 254.0f), f);
      }
      acc[j] = _mm512_fmadd_ps(f, _mm512_mul_ps(sv, _mm512_loadu_ps(&X.dx[pi * 16])), acc[j]);
    }
  }
  for (int j = 0; j < NB; ++j) {
    const float* xs = &X.sum[static_cast<size_t>(i0 + j) * X.G];
    float bias = 0.0f;
    for (int g = 0; g < X.G; ++g) bias += b[g] * xs[g];
    Y[static_cast<size_t>(i0 + j) * W.rows + r] = _mm512_reduce_add_ps(acc[j]) + bias;
  }
}

template <bool PRECISE>
LILY_AVX512 void rows_impl(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, float* Y) {
  float s[256], b[256];  // one row's scales and biases (G <= 256 checked by the caller)
  for (int64_t r = r0; r < r1; ++r) {
    for (int g = 0; g < X.G; ++g) {
      s[g] = scale_at(W.scales, W.sdtype, r * X.G + g);
      b[g] = scale_at(W.biases, W.sdtype, r * X.G + g);
    }
    int i = 0;
    for (; i + 4 <= X.n; i += 4) rows_block<PRECISE, 4>(W, r, X, i, Y, s, b);
    for (; i < X.n; ++i) rows_block<PRECISE, 1>(W, r, X, i, Y, s, b);
  }
}

}  // namespace

bool q4_avx512_available() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

void q4_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  if (precise)
    rows_impl<true>(W, r0, r1, X, Y);
  else
    rows_impl<false>(W, r0, r1, X, Y);
}

}  // namespace lily::fast
