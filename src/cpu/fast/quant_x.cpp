#include "cpu/fast/quant_x.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__)
// GCC 12 reports false (maybe-)uninitialized warnings inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace lily::fast {

void quantize_x_prepare(int n, int cols, bool precise, QuantX& q) {
  q.n = n;
  q.G = cols / 64;
  q.P = (q.G + 1) / 2;
  const size_t pairs = static_cast<size_t>(n) * q.P;
  if (q.hi.size() < pairs * 128) q.hi.resize(pairs * 128);
  if (precise && q.lo.size() < pairs * 128) q.lo.resize(pairs * 128);
  if (q.dx.size() < pairs * 16) q.dx.resize(pairs * 16);
  if (q.sum.size() < static_cast<size_t>(n) * q.G) q.sum.resize(static_cast<size_t>(n) * q.G);
  if (q.dxg.size() < static_cast<size_t>(n) * q.G) q.dxg.resize(static_cast<size_t>(n) * q.G);
}

namespace {

void rows_scalar(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  for (int i = i0; i < i1; ++i) {
    for (int p = 0; p < q.P; ++p) {
      int8_t* hi = &q.hi[(static_cast<size_t>(i) * q.P + p) * 128];
      int8_t* lo = precise ? &q.lo[(static_cast<size_t>(i) * q.P + p) * 128] : nullptr;
      float* dxl = &q.dx[(static_cast<size_t>(i) * q.P + p) * 16];
      for (int half = 0; half < 2; ++half) {
        const int g = 2 * p + half;
        if (g >= q.G) {  // odd group count: the pair's second half is empty
          for (int k = 0; k < 32; ++k) {
            hi[half * 32 + k] = hi[64 + half * 32 + k] = 0;
            if (lo) lo[half * 32 + k] = lo[64 + half * 32 + k] = 0;
          }
          for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = 0.0f;
          continue;
        }
        const float* x = X + static_cast<size_t>(i) * cols + static_cast<size_t>(g) * 64;
        float amax = 0.0f, s = 0.0f;
        for (int k = 0; k < 64; ++k) {
          amax = std::max(amax, std::fabs(x[k]));
          s += x[k];
        }
        q.sum[static_cast<size_t>(i) * q.G + g] = s;
        const float d = amax > 0.0f ? amax / 127.0f : 0.0f;
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = d;
        q.dxg[static_cast<size_t>(i) * q.G + g] = d;
        for (int k = 0; k < 64; ++k) {
          const float v = x[k] * inv;
          const float h = std::nearbyint(v);
          // element k sits in nibble (k & 1) of byte k/2: even elements first, then odd ones
          const int slot = (k & 1) * 64 + half * 32 + (k >> 1);
          hi[slot] = static_cast<int8_t>(h);
          if (lo) lo[slot] = static_cast<int8_t>(std::nearbyint((v - h) * 254.0f));
        }
      }
    }
  }
}

#if defined(__x86_64__)
#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
// One group of 64 per step: amax and Σx in registers, then the even and odd elements split by a two-source
// permute and narrowed to int8 with saturation (values are within [-127, 127] already).
LILY_AVX512 void rows_avx512(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (int i = i0; i < i1; ++i)
    for (int p = 0; p < q.P; ++p) {
      const size_t pi = static_cast<size_t>(i) * q.P + p;
      int8_t* hi = &q.hi[pi * 128];
      int8_t* lo = precise ? &q.lo[pi * 128] : nullptr;
      float* dxl = &q.dx[pi * 16];
      for (int half = 0; half < 2; ++half) {
        const int g = 2 * p + half;
        if (g >= q.G) {
          for (int k = 0; k < 32; ++k) {
            hi[half * 32 + k] = hi[64 + half * 32 + k] = 0;
            if (lo) lo[half * 32 + k] = lo[64 + half * 32 + k] = 0;
          }
          for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = 0.0f;
          continue;
        }
        const float* x = X + static_cast<size_t>(i) * cols + static_cast<size_t>(g) * 64;
        __m512 v[4];
        for (int c = 0; c < 4; ++c) v[c] = _mm512_loadu_ps(x + 16 * c);
        const __m512 am = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(v[0], absmask), _mm512_and_ps(v[1], absmask)),
                                        _mm512_max_ps(_mm512_and_ps(v[2], absmask), _mm512_and_ps(v[3], absmask)));
        const float amax = _mm512_reduce_max_ps(am);
        q.sum[static_cast<size_t>(i) * q.G + g] =
            _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3])));
        const float d = amax > 0.0f ? amax / 127.0f : 0.0f;
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = d;
        q.dxg[static_cast<size_t>(i) * q.G + g] = d;
        const __m512 vi = _mm512_set1_ps(inv);
        // [even 0..31 of the group | odd 0..31] as 4 x 16 floats
        const __m512 part[4] = {_mm512_permutex2var_ps(v[0], ev, v[1]), _mm512_permutex2var_ps(v[2], ev, v[3]),
                                _mm512_permutex2var_ps(v[0], od, v[1]), _mm512_permutex2var_ps(v[2], od, v[3])};
        for (int c = 0; c < 4; ++c) {
          const __m512 s = _mm512_mul_ps(part[c], vi);
          const __m512 h = _mm512_roundscale_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
          const int slot = (c >> 1) * 64 + half * 32 + (c & 1) * 16;
          _mm_storeu_si128(reinterpret_cast<__m128i*>(hi + slot), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(h)));
          if (lo) {
            const __m512 l = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_sub_ps(s, h), _mm512_set1_ps(254.0f)),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + slot), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(l)));
          }
        }
      }
    }
}

bool has_avx512() {
  static const bool v = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return v;
}
#endif

}  // namespace

void quantize_x_rows(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
#if defined(__x86_64__)
  if (has_avx512()) {
    rows_avx512(X, i0, i1, cols, precise, q);
    return;
  }
#endif
  rows_scalar(X, i0, i1, cols, precise, q);
}

void quantize_x(const float* X, int n, int cols, bool precise, QuantX& q) {
  quantize_x_prepare(n, cols, precise, q);
  quantize_x_rows(X, 0, n, cols, precise, q);
}

void quantize_x_ref(const float* X, int n, int cols, bool precise, QuantX& q) {
  quantize_x_prepare(n, cols, precise, q);
  rows_scalar(X, 0, n, cols, precise, q);
}

}  // namespace lily::fast
