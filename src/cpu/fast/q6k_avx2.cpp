// GGUF Q6_K matrices (QMatrix::Kind::Ggml, kept in their blocks) against f32 activations, AVX2 + FMA (the avx2
// tier; the avx512 tier runs q6k_avx512.cpp on quantised activations). Rows are decoded in registers to f32, exactly as gguf_dequant_row decodes them
// (d·sc is exact in f32, and so is its product with q - 32), into a small per-thread buffer, then dotted with the
// activation rows 4 weight rows at a time (each activation load serves 4 rows). Decode (n < 4): 4 rows decoded,
// then dotted. Prefill: 16 rows decoded once and every activation row dotted with them, so each activation row
// is read once per 16 weight rows.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "cpu/fast/avx2_util.h"
#include "cpu/fast/q6k_kernels.h"
#include "io/gguf.h"

namespace lily::fast {

namespace {

constexpr int kBlockBytes = 210;  // ql[128], qh[64], int8 scales[16], f16 d

// 32 codes q - 32 (int8) of one quarter t of a 128-element half: low nibbles (t 0, 1) or high (t 2, 3) of
// ql[32 * (t & 1) ...], with bits 2t, 2t+1 of qh as bits 4, 5.
LILY_AVX2 inline __m256i quarter(__m256i l0, __m256i l1, __m256i h, int t) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  const __m256i l = (t & 1) ? l1 : l0;
  const __m256i lo = t < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * t), m3);
  const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));  // hi < 4: no carry across bytes
  return _mm256_sub_epi8(q, _mm256_set1_epi8(32));
}

// One row (cols / 256 blocks) to f32: out[e] = (d·sc[e / 16])·(q_e - 32).
LILY_AVX2 void decode_row(const uint8_t* p, int64_t cols, float* out) {
  for (int64_t b = 0; b < cols / 256; ++b, p += kBlockBytes, out += 256) {
    uint16_t dh;
    std::memcpy(&dh, p + 208, 2);
    const float d = f16_to_f32(dh);
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = p + half * 64;
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + half * 32));
      for (int t = 0; t < 4; ++t) {
        const __m256i q = quarter(l0, l1, h, t);
        const int e0 = half * 128 + t * 32;  // first element: sub-blocks e0 / 16 and e0 / 16 + 1
        const __m128i qa = _mm256_castsi256_si128(q), qb = _mm256_extracti128_si256(q, 1);
        const __m256 s0 = _mm256_set1_ps(d * float(sc[e0 / 16])), s1 = _mm256_set1_ps(d * float(sc[e0 / 16 + 1]));
        _mm256_storeu_ps(out + e0, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qa))));
        _mm256_storeu_ps(out + e0 + 8, _mm256_mul_ps(s0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(qa, 8)))));
        _mm256_storeu_ps(out + e0 + 16, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(qb))));
        _mm256_storeu_ps(out + e0 + 24, _mm256_mul_ps(s1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(qb, 8)))));
      }
    }
  }
}

LILY_AVX2 inline float hsum(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));
}

// y[k] = w[k]·x for the 4 decoded rows w + k·cols (two accumulators per row).
LILY_AVX2 inline void dot4(const float* w, int64_t cols, const float* x, float* y) {
  __m256 a[4][2];
  for (auto& r : a) r[0] = r[1] = _mm256_setzero_ps();
  for (int64_t c = 0; c < cols; c += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + c), x1 = _mm256_loadu_ps(x + c + 8);
    for (int k = 0; k < 4; ++k) {
      a[k][0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * cols + c), x0, a[k][0]);
      a[k][1] = _mm256_fmadd_ps(_mm256_loadu_ps(w + k * cols + c + 8), x1, a[k][1]);
    }
  }
  for (int k = 0; k < 4; ++k) y[k] = hsum(_mm256_add_ps(a[k][0], a[k][1]));
}

}  // namespace

bool q6k_supported(const QMatrix& W) {
  return W.kind == QMatrix::Kind::Ggml && W.gtype == uint32_t(GgmlType::Q6_K) && W.cols % 256 == 0 &&
         W.row_bytes() == size_t(W.cols / 256) * kBlockBytes;
}

LILY_AVX2 void q6k_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y) {
  const int64_t cols = W.cols;
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  const int64_t chunk = n < 4 ? 4 : 16;  // rows decoded at a time
  thread_local std::vector<float> buf;
  if (buf.size() < size_t(chunk * cols)) buf.resize(size_t(chunk * cols));
  for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
    const int64_t nr = std::min(chunk, r1 - c0);
    for (int64_t k = 0; k < chunk; ++k) {  // rows past r1 decoded as zeros (their sums are dropped)
      float* o = buf.data() + k * cols;
      if (k < nr) decode_row(static_cast<const uint8_t*>(W.w) + (c0 + k) * rb, cols, o);
      else std::memset(o, 0, size_t(cols) * sizeof(float));
    }
    for (int i = 0; i < n; ++i) {
      const float* x = X + static_cast<size_t>(i) * cols;
      float* y = Y + static_cast<size_t>(i) * W.rows + c0;
      for (int64_t k = 0; k < nr; k += 4) {
        float v[4];
        dot4(buf.data() + k * cols, cols, x, v);
        for (int j = 0; j < 4 && k + j < nr; ++j) y[k + j] = v[j];
      }
    }
  }
}

}  // namespace lily::fast

#else  // not x86-64: never called (fast_matmul takes the generic path there)

#include <cstdlib>

#include "cpu/fast/q6k_kernels.h"
#include "io/gguf.h"

namespace lily::fast {
bool q6k_supported(const QMatrix& W) {
  return W.kind == QMatrix::Kind::Ggml && W.gtype == uint32_t(GgmlType::Q6_K) && W.cols % 256 == 0;
}
void q6k_rows_avx2(const QMatrix&, int64_t, int64_t, const float*, int, float*) { std::abort(); }
}  // namespace lily::fast

#endif
