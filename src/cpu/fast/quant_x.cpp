#include "cpu/fast/quant_x.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__)
// GCC 12 reports false (maybe-)uninitialized warnings inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "cpu/fast/avx2_util.h"
#endif
#include "cpu/fast/cpu_isa.h"

namespace lily::fast {

void quantize_x_prepare(int n, int cols, bool precise, QuantX& q, bool halves) {
  q.n = n;
  q.G = cols / 64;
  q.P = (q.G + 1) / 2;
  const size_t pairs = static_cast<size_t>(n) * q.P;
  if (q.hi.size() < pairs * 128) q.hi.resize(pairs * 128);
  if (precise && q.lo.size() < pairs * 128) q.lo.resize(pairs * 128);
  if (q.dx.size() < pairs * 16) q.dx.resize(pairs * 16);
  if (q.sum.size() < static_cast<size_t>(n) * q.G) q.sum.resize(static_cast<size_t>(n) * q.G);
  if (q.dxg.size() < static_cast<size_t>(n) * q.G) q.dxg.resize(static_cast<size_t>(n) * q.G);
  q.halves = halves;
  if (halves && q.sum32.size() < static_cast<size_t>(n) * 2 * q.G) q.sum32.resize(static_cast<size_t>(n) * 2 * q.G);
  if (q.res8.size() < static_cast<size_t>(n) * q.G) q.res8.resize(static_cast<size_t>(n) * q.G);
  if (halves && q.res8_32.size() < static_cast<size_t>(n) * 2 * q.G)
    q.res8_32.resize(static_cast<size_t>(n) * 2 * q.G);
  q.n_out.assign(static_cast<size_t>(n), 0);
  if (q.out_col.size() < static_cast<size_t>(n) * kMaxOutliers) {
    q.out_col.resize(static_cast<size_t>(n) * kMaxOutliers);
    q.out_val.resize(static_cast<size_t>(n) * kMaxOutliers);
  }
}

namespace {

void empty_half(int8_t* hi, int8_t* lo, float* dxl, int half) {
  for (int k = 0; k < 32; ++k) {
    hi[half * 32 + k] = hi[64 + half * 32 + k] = 0;
    if (lo) lo[half * 32 + k] = lo[64 + half * 32 + k] = 0;
  }
  for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = 0.0f;
}

// Where group g (64 elements) of row i goes: its x, its pair's hi/lo bytes (128 each; half 0 or 1 of the pair),
// the pair's 16 dx words.
struct GroupOut {
  const float* x;
  int8_t* hi;
  int8_t* lo;  // null unless precise
  float* dxl;
  int half, i, g;
};

// Walks the groups of rows [i0, i1) (X points at row i0), two per 128-byte pair, calling f(GroupOut) for each; the
// second half of a pair past the last group (odd group count) is zeroed. Inlined into each ISA's caller (the callee
// is a subset target).
template <class F>
__attribute__((always_inline)) inline void for_each_group(const float* X, int i0, int i1, int cols, bool precise,
                                                          QuantX& q, F&& f) {
  for (int i = i0; i < i1; ++i)
    for (int p = 0; p < q.P; ++p) {
      const size_t pi = static_cast<size_t>(i) * q.P + p;
      int8_t* hi = &q.hi[pi * 128];
      int8_t* lo = precise ? &q.lo[pi * 128] : nullptr;
      float* dxl = &q.dx[pi * 16];
      for (int half = 0; half < 2; ++half) {
        const int g = 2 * p + half;
        if (g >= q.G) {
          empty_half(hi, lo, dxl, half);
          continue;
        }
        f(GroupOut{X + static_cast<size_t>(i - i0) * cols + static_cast<size_t>(g) * 64, hi, lo, dxl, half, i, g});
      }
    }
}

// Stores the group's Σx and its scale d = amax / 127 (dx words and dxg); returns 1 / d (0 for an all-zero group).
inline float set_group_scale(QuantX& q, const GroupOut& o, float amax, float sum) {
  q.sum[static_cast<size_t>(o.i) * q.G + o.g] = sum;
  const float d = amax > 0.0f ? amax / 127.0f : 0.0f;
  for (int k = 0; k < 8; ++k) o.dxl[o.half * 8 + k] = d;
  q.dxg[static_cast<size_t>(o.i) * q.G + o.g] = d;
  return d > 0.0f ? 1.0f / d : 0.0f;
}

void rows_scalar(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  for_each_group(X, i0, i1, cols, precise, q, [&](const GroupOut& o) {
    float amax = 0.0f, s = 0.0f;
    for (int k = 0; k < 64; ++k) {
      amax = std::max(amax, std::fabs(o.x[k]));
      s += o.x[k];
    }
    const float inv = set_group_scale(q, o, amax, s);
    for (int k = 0; k < 64; ++k) {
      const float v = o.x[k] * inv;
      const float h = std::nearbyint(v);
      // element k sits in nibble (k & 1) of byte k/2: even elements first, then odd ones
      const int slot = (k & 1) * 64 + o.half * 32 + (k >> 1);
      o.hi[slot] = static_cast<int8_t>(h);
      if (o.lo) o.lo[slot] = static_cast<int8_t>(std::nearbyint((v - h) * 254.0f));
    }
  });
}

#if defined(__x86_64__)
#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))
// One group of 64 per step: amax and Σx in registers, then the even and odd elements split by a two-source
// permute and narrowed to int8 with saturation (values are within [-127, 127] already).
LILY_AVX512 void rows_avx512(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  const __m512i ev = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for_each_group(X, i0, i1, cols, precise, q, [&](const GroupOut& o) LILY_AVX512 {
    int8_t* hi = o.hi;
    int8_t* lo = o.lo;
    const int half = o.half;
    __m512 v[4];
    for (int c = 0; c < 4; ++c) v[c] = _mm512_loadu_ps(o.x + 16 * c);
    const __m512 am = _mm512_max_ps(_mm512_max_ps(_mm512_and_ps(v[0], absmask), _mm512_and_ps(v[1], absmask)),
                                    _mm512_max_ps(_mm512_and_ps(v[2], absmask), _mm512_and_ps(v[3], absmask)));
    const float inv = set_group_scale(
        q, o, _mm512_reduce_max_ps(am),
        _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[1]), _mm512_add_ps(v[2], v[3]))));
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
  });
}

// AVX2 + FMA: the same steps as rows_avx512 on 8-lane registers; Σx summed in rows_avx512's order (its lane l
// of 16 holds (x[l] + x[16+l]) + (x[32+l] + x[48+l]), then _mm512_reduce_add_ps), so every output, Σx included,
// is bit-identical to it.
LILY_AVX2 void rows_avx2(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i dword_order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // 4 x 8 int32 (each in [-127, 127]) -> 32 int8 in order
  auto narrow = [&](const __m256i* v) LILY_AVX2 {
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    return _mm256_permutevar8x32_epi32(w, dword_order);
  };
  for_each_group(X, i0, i1, cols, precise, q, [&](const GroupOut& o) LILY_AVX2 {
    int8_t* hi = o.hi;
    int8_t* lo = o.lo;
    const int half = o.half;
    __m256 v[8];
    for (int c = 0; c < 8; ++c) v[c] = _mm256_loadu_ps(o.x + 8 * c);
    __m256 am = _mm256_and_ps(v[0], absmask);
    for (int c = 1; c < 8; ++c) am = _mm256_max_ps(am, _mm256_and_ps(v[c], absmask));
    alignas(32) float m8[8];
    _mm256_store_ps(m8, am);
    float amax = m8[0];
    for (int k = 1; k < 8; ++k) amax = std::max(amax, m8[k]);
    const float inv = set_group_scale(
        q, o, amax,
        reduce_add16_avx2(_mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[4], v[6])),
                          _mm256_add_ps(_mm256_add_ps(v[1], v[3]), _mm256_add_ps(v[5], v[7]))));
    const __m256 vi = _mm256_set1_ps(inv);
    for (int odd = 0; odd < 2; ++odd) {
      __m256i hq[4], lq[4];
      for (int m = 0; m < 4; ++m) {
        // elements 16m + {0, 2, ..., 14} (even) or 16m + {1, 3, ..., 15} (odd), in order
        const __m256 e = odd ? _mm256_shuffle_ps(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1))
                             : _mm256_shuffle_ps(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 sc = _mm256_mul_ps(
            _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))), vi);
        const __m256 h = _mm256_round_ps(sc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        hq[m] = _mm256_cvtps_epi32(h);
        if (lo)
          lq[m] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_sub_ps(sc, h), _mm256_set1_ps(254.0f)),
                                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      }
      const int slot = odd * 64 + half * 32;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + slot), narrow(hq));
      if (lo) _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + slot), narrow(lq));
    }
  });
}
#endif

}  // namespace

namespace {
void rows_isa(Isa isa, const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
#if defined(__x86_64__)
  switch (isa) {
    case Isa::Avx512: rows_avx512(X, i0, i1, cols, precise, q); return;
    case Isa::Avx2: rows_avx2(X, i0, i1, cols, precise, q); return;
    default: break;
  }
#endif
  rows_scalar(X, i0, i1, cols, precise, q);
}

// Σx per 32 elements, in order (every tier the same), where the matrices have groups of 32; and the rounding
// residuals res8 (res8_32) from the stored codes (every tier the same: the codes are bit-identical). X points at
// row i0 (as rows_isa's).
void group_sums(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  for (int i = i0; i < i1; ++i)
    for (int g = 0; g < q.G; ++g) {
      const float* x = X + static_cast<size_t>(i - i0) * cols + static_cast<size_t>(g) * 64;
      const size_t pi = static_cast<size_t>(i) * q.P + static_cast<size_t>(g / 2);
      const int8_t* hi = &q.hi[pi * 128];
      const int8_t* lo = precise ? &q.lo[pi * 128] : nullptr;
      const double dx = q.dxg[static_cast<size_t>(i) * q.G + g];
      double r[2] = {0.0, 0.0};
      float s[2] = {0.0f, 0.0f};
      for (int k = 0; k < 64; ++k) {
        const int slot = (k & 1) * 64 + (g % 2) * 32 + (k >> 1);  // quant_x's layout (rows_scalar)
        const double xq = lo ? hi[slot] + lo[slot] / 254.0 : hi[slot];
        r[k / 32] += double(x[k]) - dx * xq;
        s[k / 32] += x[k];
      }
      q.res8[static_cast<size_t>(i) * q.G + g] = static_cast<float>(8.0 * (r[0] + r[1]));
      if (q.halves)
        for (int h = 0; h < 2; ++h) {
          q.sum32[(static_cast<size_t>(i) * q.G + g) * 2 + h] = s[h];
          q.res8_32[(static_cast<size_t>(i) * q.G + g) * 2 + h] = static_cast<float>(8.0 * r[h]);
        }
    }
}

// rows [i0, i1) (X at row i0): codes and scales, then the sums and residuals
void quantize_run(Isa isa, const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  rows_isa(isa, X, i0, i1, cols, precise, q);
  group_sums(X, i0, i1, cols, precise, q);
}

// max |x| and Σ|x| of a row (find_outliers' first pass)
struct AbsStats {
  float amax = 0.0f, asum = 0.0f;
};
AbsStats abs_stats_scalar(const float* x, int c0, int cols, AbsStats st) {
  for (int c = c0; c < cols; ++c) {
    const float a = std::fabs(x[c]);
    st.amax = std::max(st.amax, a);
    st.asum += a;
  }
  return st;
}
#if defined(__x86_64__)
LILY_AVX512 AbsStats abs_stats_avx512(const float* x, int cols) {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  __m512 m = _mm512_setzero_ps(), sm = _mm512_setzero_ps();
  int c = 0;
  for (; c + 16 <= cols; c += 16) {
    const __m512 v = _mm512_and_ps(_mm512_loadu_ps(x + c), absmask);
    m = _mm512_max_ps(m, v);
    sm = _mm512_add_ps(sm, v);
  }
  return abs_stats_scalar(x, c, cols, AbsStats{_mm512_reduce_max_ps(m), _mm512_reduce_add_ps(sm)});
}
LILY_AVX2 AbsStats abs_stats_avx2(const float* x, int cols) {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 m = _mm256_setzero_ps(), sm = _mm256_setzero_ps();
  int c = 0;
  for (; c + 8 <= cols; c += 8) {
    const __m256 v = _mm256_and_ps(_mm256_loadu_ps(x + c), absmask);
    m = _mm256_max_ps(m, v);
    sm = _mm256_add_ps(sm, v);
  }
  alignas(32) float lm[8], ls[8];
  _mm256_store_ps(lm, m);
  _mm256_store_ps(ls, sm);
  AbsStats st;
  for (int k = 0; k < 8; ++k) {
    st.amax = std::max(st.amax, lm[k]);
    st.asum += ls[k];
  }
  return abs_stats_scalar(x, c, cols, st);
}
#endif
AbsStats abs_stats(const float* x, int cols) {
#if defined(__x86_64__)
  switch (active_isa()) {
    case Isa::Avx512: return abs_stats_avx512(x, cols);
    case Isa::Avx2: return abs_stats_avx2(x, cols);
    default: break;
  }
#endif
  return abs_stats_scalar(x, 0, cols, AbsStats{});
}
}  // namespace

int find_outliers(const float* x, int cols, int32_t* col, float* val) {
  if (cols <= 2 * kMaxOutliers) return 0;
  // early out: typical >= (Σ|x| - k·max) / (cols - k), so max <= ratio · that bound means no element is an outlier
  const AbsStats st = abs_stats(x, cols);
  const float amax = st.amax, asum = st.asum;
  if (!(amax > 0.0f) || !std::isfinite(asum)) return 0;
  const float rest = float(cols - kMaxOutliers);
  if (amax <= kOutlierRatio * std::max(0.0f, asum - kMaxOutliers * amax) / rest) return 0;
  // the kMaxOutliers largest |x| (insertion into a short sorted list, largest first)
  int idx[kMaxOutliers];
  float mag[kMaxOutliers];
  int m = 0;
  for (int c = 0; c < cols; ++c) {
    const float a = std::fabs(x[c]);
    if (m == kMaxOutliers && a <= mag[m - 1]) continue;
    int j = m < kMaxOutliers ? m++ : m - 1;
    while (j > 0 && mag[j - 1] < a) {
      mag[j] = mag[j - 1];
      idx[j] = idx[j - 1];
      --j;
    }
    mag[j] = a;
    idx[j] = c;
  }
  float top = 0.0f;
  for (int j = 0; j < m; ++j) top += mag[j];
  const float typical = std::max(0.0f, asum - top) / rest;
  int k = 0;
  for (int j = 0; j < m; ++j)
    if (mag[j] > kOutlierRatio * typical) {
      col[k] = idx[j];
      val[k] = x[idx[j]];
      ++k;
    }
  return k;
}

void quantize_x_rows(const float* X, int i0, int i1, int cols, bool precise, QuantX& q) {
  const Isa isa = active_isa();
  thread_local std::vector<float> row;
  int run = i0;  // rows [run, i) have no outliers and are not yet quantised
  for (int i = i0; i < i1; ++i) {
    const float* x = X + static_cast<size_t>(i) * cols;
    const size_t o = static_cast<size_t>(i) * kMaxOutliers;
    const int k = find_outliers(x, cols, &q.out_col[o], &q.out_val[o]);
    q.n_out[static_cast<size_t>(i)] = k;
    if (k == 0) {
      if (i + 1 - run >= 4) {  // quantise while the rows are still in cache
        quantize_run(isa, X + static_cast<size_t>(run) * cols, run, i + 1, cols, precise, q);
        run = i + 1;
      }
      continue;
    }
    if (run < i) quantize_run(isa, X + static_cast<size_t>(run) * cols, run, i, cols, precise, q);
    row.assign(x, x + cols);
    for (int j = 0; j < k; ++j) row[static_cast<size_t>(q.out_col[o + j])] = 0.0f;
    quantize_run(isa, row.data(), i, i + 1, cols, precise, q);  // codes, Σx and residuals without the outliers
    run = i + 1;
  }
  if (run < i1) quantize_run(isa, X + static_cast<size_t>(run) * cols, run, i1, cols, precise, q);
}

void quantize_x_isa(Isa isa, const float* X, int n, int cols, bool precise, QuantX& q, bool halves) {
  quantize_x_prepare(n, cols, precise, q, halves);
  rows_isa(isa, X, 0, n, cols, precise, q);
  group_sums(X, 0, n, cols, precise, q);
}

void quantize_x(const float* X, int n, int cols, bool precise, QuantX& q, bool halves) {
  quantize_x_prepare(n, cols, precise, q, halves);
  quantize_x_rows(X, 0, n, cols, precise, q);
}

void quantize_x_ref(const float* X, int n, int cols, bool precise, QuantX& q, bool halves) {
  quantize_x_prepare(n, cols, precise, q, halves);
  rows_scalar(X, 0, n, cols, precise, q);
  group_sums(X, 0, n, cols, precise, q);
}

}  // namespace lily::fast
