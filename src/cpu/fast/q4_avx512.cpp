// 4-bit affine (MLX, group 64; or group 32, GGUF Q4_0 / Q4_1 / Q4_K) matrix x activations with AVX-512 VNNI:
// nibbles are unpacked in registers and multiplied as u8 x s8 (vpdpbusd) against the quantised activations; per
// group y += scale·dx·Σ(q·xq) + bias·Σx. Two 64-element groups per 512-bit register; with groups of 32 (SUB = 2)
// the dword lanes 0-3 / 4-7 of a 64-group (elements 0-31 / 32-63) take their own scale and Σx.
// GCC 12 reports a false maybe-uninitialized inside its own AVX-512 intrinsic headers (_mm512_undefined_*).
#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace {


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
    const float* r8 = &X.res8[static_cast<size_t>(i0 + j) * X.G];
    float bias = 0.0f;
    for (int g = 0; g < X.G; ++g) bias += b[g] * xs[g] + s[g] * r8[g];  // quant_x.h: res8 centres the codes
    Y[static_cast<size_t>(i0 + j) * W.rows + r] = _mm512_reduce_add_ps(acc[j]) + bias;
  }
}

// One activation row against 4 weight rows at a time (decode): the activation bytes are loaded once per
// pair of groups for 4 rows, and each row's scale·dx per group is precomputed so a single permute places
// it in the lanes of its group.
// 16 scales (bf16/f16/f32/KS8) starting at element i, zero past `valid` (KS8: i a multiple of 8, as every caller's
// index is: rows of a KS8 matrix hold whole 8-scale blocks and g steps by 16)
LILY_AVX512 inline __m512 load16(const void* p, DType t, int64_t i, int valid) {
  const __mmask16 m = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  if (t == DType::KS8) {  // block i / 8 (lanes 0-7) and, when valid > 8, the next one (lanes 8-15)
    const uint8_t* b = static_cast<const uint8_t*>(p) + (i / 8) * 12;
    const bool two = valid > 8;
    float m0, m1 = 0.0f;
    std::memcpy(&m0, b, 4);
    __m128i f = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 4));
    if (two) {
      std::memcpy(&m1, b + 12, 4);
      f = _mm_unpacklo_epi64(f, _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 16)));
    }
    const __m512 fv = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(f));
    const __m512 mv = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(m0)), _mm256_set1_ps(m1), 1);
    return _mm512_maskz_mul_ps(m, mv, fv);
  }
  if (t == DType::BF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  if (t == DType::F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(p) + i));
  return _mm512_maskz_loadu_ps(m, static_cast<const float*>(p) + i);
}

template <bool PRECISE, int SUB>
LILY_AVX512 void gemv_quad(const QMatrix& W, int64_t r, int nr, const QuantX& X, int i, float* Y) {
  const int G = X.G, NG = G * SUB;  // activation groups (64), weight groups per row
  alignas(64) float sd[4][512 + 16];
  // bias terms b·Σx (and s·res8) per row, added after the horizontal sums (as the reference kernels do; summing
  // them into the lanes instead moved the tiny model's greedy-decode error from 0.018 to 0.024, uncentred codes)
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  alignas(16) float bias[4] = {0, 0, 0, 0};
  const float* dxg = &X.dxg[static_cast<size_t>(i) * G];
  const float* xs = SUB == 2 ? &X.sum32[static_cast<size_t>(i) * NG] : &X.sum[static_cast<size_t>(i) * G];
  const float* r8 = SUB == 2 ? &X.res8_32[static_cast<size_t>(i) * NG] : &X.res8[static_cast<size_t>(i) * G];
  alignas(64) float dx2[512];  // SUB 2: dx of each weight group (its activation group's)
  if constexpr (SUB == 2)
    for (int g = 0; g < NG; ++g) dx2[g] = dxg[g >> 1];
  const float* dxw = SUB == 2 ? dx2 : dxg;
  for (int k = 0; k < nr; ++k) {
    __m512 bacc = _mm512_setzero_ps();
    for (int g = 0; g < NG; g += 16) {
      const int valid = NG - g;
      const __m512 sv = load16(W.scales, W.sdtype, (r + k) * NG + g, valid);
      const __m512 bv = load16(W.biases, W.sdtype, (r + k) * NG + g, valid);
      const __mmask16 m = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
      _mm512_store_ps(&sd[k][g], _mm512_mul_ps(sv, _mm512_maskz_loadu_ps(m, dxw + g)));
      bacc = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(m, xs + g), bacc);
      bacc = _mm512_fmadd_ps(sv, _mm512_maskz_loadu_ps(m, r8 + g), bacc);  // quant_x.h: res8 centres the codes
    }
    bias[k] = _mm512_reduce_add_ps(bacc);
  }
  // row_bytes() is out of line: a call inside the loop would spill every zmm register around it
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  const uint8_t* wr[4];
  for (int k = 0; k < 4; ++k) wr[k] = static_cast<const uint8_t*>(W.w) + (r + (k < nr ? k : 0)) * rb;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // short rows (K = 512: a quad is 1 KiB, done in ~40 ns) need several quads in flight: 8 KiB ahead
  const int64_t pf = rb >= 1024 ? 4 * rb : 8192;
  const int8_t* xh = X.hi_at(i);
  const int8_t* xl = PRECISE ? X.lo_at(i) : nullptr;
  for (int p = 0; p < X.P; ++p) {
    const __mmask64 mask = 2 * p + 1 < G ? ~0ULL : 0xFFFFFFFFULL;
    const __m512i xe = _mm512_loadu_si512(xh + p * 128), xo = _mm512_loadu_si512(xh + p * 128 + 64);
    __m512i le, lo_;
    if constexpr (PRECISE) {
      le = _mm512_loadu_si512(xl + p * 128);
      lo_ = _mm512_loadu_si512(xl + p * 128 + 64);
    }
    // lane l of pair p takes weight group 2p + l / 8 (SUB 1) or 4p + l / 4 (SUB 2): its index in sd's 16-float chunk
    const int j0 = (2 * SUB * p) & 15;
    const __m512i idx = SUB == 2 ? _mm512_set_epi32(j0 + 3, j0 + 3, j0 + 3, j0 + 3, j0 + 2, j0 + 2, j0 + 2, j0 + 2,
                                                     j0 + 1, j0 + 1, j0 + 1, j0 + 1, j0, j0, j0, j0)
                                 : _mm512_set_epi32(j0 + 1, j0 + 1, j0 + 1, j0 + 1, j0 + 1, j0 + 1, j0 + 1, j0 + 1,
                                                    j0, j0, j0, j0, j0, j0, j0, j0);
    const int chunk = (2 * SUB * p) & ~15;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      // 4 rows = 4 short streams 1 KiB apart, too short for the hardware prefetcher: fetch the same spot of
      // a later quad's rows ourselves (measured 7 -> 18 GB/s single-thread on a 64 MiB matrix)
      _mm_prefetch(reinterpret_cast<const char*>(wr[k] + p * 64 + pf), _MM_HINT_T0);
      const __m512i wb = _mm512_maskz_loadu_epi8(mask, wr[k] + p * 64);
      const __m512i lo = _mm512_and_si512(wb, m4);
      const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(wb, 4), m4);
      __m512i id = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xe);
      id = _mm512_dpbusd_epi32(id, hi, xo);
      __m512 f = _mm512_cvtepi32_ps(id);
      if constexpr (PRECISE) {
        __m512i il = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, le);
        il = _mm512_dpbusd_epi32(il, hi, lo_);
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_set1_ps(1.0f / 254.0f), f);
      }
      const __m512 sv = _mm512_permutexvar_ps(idx, _mm512_load_ps(&sd[k][chunk]));
      acc[k] = _mm512_fmadd_ps(f, sv, acc[k]);
    }
  }
  // the 4 horizontal sums at once: pairs of rows interleaved, then 128-bit lanes folded
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(acc[0], acc[1]), _mm512_unpackhi_ps(acc[0], acc[1]));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(acc[2], acc[3]), _mm512_unpackhi_ps(acc[2], acc[3]));
  // per 128-bit lane: [r0 r1 r0 r1] and [r2 r3 r2 r3] partial sums
  const __m512 s = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(s01), _mm512_castps_pd(s23))));
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps(s, 1));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));  // [r0 r1 r2 r3]
  _mm_mask_storeu_ps(Y + static_cast<size_t>(i) * W.rows + r, static_cast<__mmask8>((1u << nr) - 1),
                     _mm_add_ps(q, _mm_load_ps(bias)));
}

// ---- Prefill GEMM: 16 weight rows x many activation rows -------------------------------------------------
// Per group of 64 the 16 rows' 32 code bytes are transposed in registers so that zmm q (q = 0..7) holds dword q
// of every row (lane k = row r + k). Its low nibbles are the group's elements 8q, 8q+2, 8q+4, 8q+6 and its high
// nibbles 8q+1, ..., 8q+7: exactly dword q of the activation's even / odd block in the QuantX layout. One
// vpdpbusd with that dword broadcast adds 4 products for all 16 rows; 16 of them give the group's integer dot
// products of 16 weight rows with one activation row, then y[16] += (s[16]·dx)·dot + b[16]·Σx. The unpacked
// weights of a group stay in registers while every activation row of the block goes past them.
constexpr int kTile = 16;
constexpr int kActBlock = 128;

// The 16 rows' codes of one group (row k at base + k·rb, 32 bytes each) -> low / high nibbles per dword column.
LILY_AVX512 inline void tile_codes(const uint8_t* base, int64_t rb, __m512i* wl, __m512i* wh) {
  // z[j]: 256-bit half 0 = row a[j], half 1 = row a[j] + 4, chosen so that the lanes come out in row order
  static constexpr int a[8] = {0, 1, 2, 3, 8, 9, 10, 11};
  __m512i z[8], t[8], u[8];
  for (int j = 0; j < 8; ++j) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + a[j] * rb));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + (a[j] + 4) * rb));
    z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm512_unpacklo_epi32(z[j], z[j + 1]);
    t[j + 1] = _mm512_unpackhi_epi32(z[j], z[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);          // dword columns {0, 4}
    u[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);      // {1, 5}
    u[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);  // {2, 6}
    u[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);  // {3, 7}
  }
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m512i c0 = _mm512_shuffle_i32x4(u[c], u[c + 4], 0x88);  // column c
    const __m512i c1 = _mm512_shuffle_i32x4(u[c], u[c + 4], 0xDD);  // column c + 4
    wl[c] = _mm512_and_si512(c0, m4);
    wh[c] = _mm512_and_si512(_mm512_srli_epi16(c0, 4), m4);
    wl[c + 4] = _mm512_and_si512(c1, m4);
    wh[c + 4] = _mm512_and_si512(_mm512_srli_epi16(c1, 4), m4);
  }
}

// NB activation rows against the group's 16 rows held in wl / wh; acc [NB][16] in memory. SUB 2: dwords 0-3 and
// 4-7 (elements 0-31, 32-63) are two weight groups, with sv[h], bv[h] and the halves' Σx.
template <bool PRECISE, int NB, int SUB>
LILY_AVX512 inline void tile_act(const __m512i* wl, const __m512i* wh, const QuantX& X, int i, int g,
                                 const __m512* sv, const __m512* bv, float* acc) {
  const int8_t* xh[NB];
  const int8_t* xl[NB];
  __m512i ih[NB], il[NB];
  for (int j = 0; j < NB; ++j) {
    xh[j] = X.hi_at(i + j, g);
    if constexpr (PRECISE) xl[j] = X.lo_at(i + j, g);
  }
  for (int h = 0; h < SUB; ++h) {
    for (int j = 0; j < NB; ++j) {
      ih[j] = _mm512_setzero_si512();
      il[j] = _mm512_setzero_si512();
    }
#pragma GCC unroll 8
    for (int q = h * 8 / SUB; q < (h + 1) * 8 / SUB; ++q)
      for (int j = 0; j < NB; ++j) {
        if constexpr (PRECISE) {
          ih[j] = _mm512_dpbusd_epi32(ih[j], wl[q], _mm512_set1_epi32(load_i32(xh[j] + 4 * q)));
          il[j] = _mm512_dpbusd_epi32(il[j], wl[q], _mm512_set1_epi32(load_i32(xl[j] + 4 * q)));
          ih[j] = _mm512_dpbusd_epi32(ih[j], wh[q], _mm512_set1_epi32(load_i32(xh[j] + 64 + 4 * q)));
          il[j] = _mm512_dpbusd_epi32(il[j], wh[q], _mm512_set1_epi32(load_i32(xl[j] + 64 + 4 * q)));
        } else {  // two chains per row (even / odd) so that 4 rows keep 8 vpdpbusd in flight
          ih[j] = _mm512_dpbusd_epi32(ih[j], wl[q], _mm512_set1_epi32(load_i32(xh[j] + 4 * q)));
          il[j] = _mm512_dpbusd_epi32(il[j], wh[q], _mm512_set1_epi32(load_i32(xh[j] + 64 + 4 * q)));
        }
      }
    for (int j = 0; j < NB; ++j) {
      const size_t gi = static_cast<size_t>(i + j) * X.G + g;
      __m512 f;
      if constexpr (PRECISE)
        f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il[j]), _mm512_set1_ps(1.0f / 254.0f), _mm512_cvtepi32_ps(ih[j]));
      else
        f = _mm512_cvtepi32_ps(_mm512_add_epi32(ih[j], il[j]));
      const float xs = SUB == 2 ? X.sum32[2 * gi + h] : X.sum[gi], r8 = SUB == 2 ? X.res8_32[2 * gi + h] : X.res8[gi];
      float* a = acc + static_cast<size_t>(j) * kTile;
      __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(X.dxg[gi])), sv[h], _mm512_load_ps(a));
      v = _mm512_fmadd_ps(bv[h], _mm512_set1_ps(xs), v);
      _mm512_store_ps(a, _mm512_fmadd_ps(sv[h], _mm512_set1_ps(r8), v));  // quant_x.h: res8 centres the codes
    }
  }
}

// Rows [r, r + 16) against every activation row: Y[i][r..r+16).
template <bool PRECISE, int SUB>
LILY_AVX512 void tile_rows(const QMatrix& W, int64_t r, const QuantX& X, float* Y) {
  const int G = X.G, NG = G * SUB;
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  // the tile's scales and biases as f32, [k][NG] (row k of the tile), read per group by a strided gather
  alignas(64) float s[kTile * 256 * SUB], b[kTile * 256 * SUB];
  for (int k = 0; k < kTile; ++k)
    for (int g = 0; g < NG; g += 16) {
      const int valid = std::min(16, NG - g);
      const __mmask16 m = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
      _mm512_mask_storeu_ps(&s[k * NG + g], m, load16(W.scales, W.sdtype, (r + k) * NG + g, valid));
      _mm512_mask_storeu_ps(&b[k * NG + g], m, load16(W.biases, W.sdtype, (r + k) * NG + g, valid));
    }
  const __m512i gidx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                          _mm512_set1_epi32(NG));
  alignas(64) float acc[kActBlock * kTile];
  const uint8_t* w0 = static_cast<const uint8_t*>(W.w) + r * rb;
  for (int i0 = 0; i0 < X.n; i0 += kActBlock) {
    const int i1 = std::min(X.n, i0 + kActBlock);
    std::memset(acc, 0, sizeof(float) * kTile * (i1 - i0));
    for (int g = 0; g < G; ++g) {
      if (!(g & 1) && g + 4 < G)  // one line holds two groups: fetch the rows' line of group g + 4
        for (int k = 0; k < kTile; ++k)
          _mm_prefetch(reinterpret_cast<const char*>(w0 + k * rb + (g + 4) * 32), _MM_HINT_T0);
      __m512i wl[8], wh[8];
      tile_codes(w0 + g * 32, rb, wl, wh);
      __m512 sv[SUB], bv[SUB];
      for (int h = 0; h < SUB; ++h) {
        sv[h] = _mm512_i32gather_ps(gidx, s + g * SUB + h, 4);
        bv[h] = _mm512_i32gather_ps(gidx, b + g * SUB + h, 4);
      }
      int i = i0;
      for (; i + 4 <= i1; i += 4) tile_act<PRECISE, 4, SUB>(wl, wh, X, i, g, sv, bv, acc + (i - i0) * kTile);
      for (; i < i1; ++i) tile_act<PRECISE, 1, SUB>(wl, wh, X, i, g, sv, bv, acc + (i - i0) * kTile);
    }
    for (int i = i0; i < i1; ++i)
      _mm512_storeu_ps(Y + static_cast<size_t>(i) * W.rows + r, _mm512_load_ps(acc + (i - i0) * kTile));
  }
}

template <bool PRECISE>
LILY_AVX512 void rows_impl(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, float* Y) {
  const bool g32 = W.group == 32;
  if (X.n < 4) {  // decode: 4 weight rows at a time against each activation row
    for (int64_t r = r0; r < r1; r += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int i = 0; i < X.n; ++i) {
        if (g32) gemv_quad<PRECISE, 2>(W, r, nr, X, i, Y);
        else gemv_quad<PRECISE, 1>(W, r, nr, X, i, Y);
      }
    }
    return;
  }
  // prefill: activation rows in blocks that stay in L2 (64 rows x 2048 cols x 2 B = 256 KB), each weight row
  // unpacked once per block and multiplied with 8 activation rows at a time
  if (X.n >= kTileMinRows) {  // 16 rows at a time, the rest (rows % 16) below
    for (; r0 + kTile <= r1; r0 += kTile) {
      if (g32) tile_rows<PRECISE, 2>(W, r0, X, Y);
      else tile_rows<PRECISE, 1>(W, r0, X, Y);
    }
    if (r0 == r1) return;
  }
  if (g32) {  // the last rows % 16 of a group-32 matrix: the portable kernel
    q4_rows_portable(W, r0, r1, X, PRECISE, Y);
    return;
  }
  constexpr int kXBlock = 64;
  float s[256], b[256];  // one row's scales and biases (G <= 256 checked by the caller)
  for (int i0 = 0; i0 < X.n; i0 += kXBlock) {
    const int i1 = std::min(X.n, i0 + kXBlock);
    for (int64_t r = r0; r < r1; ++r) {
      for (int g = 0; g < X.G; ++g) {
        s[g] = scale_at(W.scales, W.sdtype, r * X.G + g);
        b[g] = scale_at(W.biases, W.sdtype, r * X.G + g);
      }
      int i = i0;
      for (; i + 8 <= i1; i += 8) rows_block<PRECISE, 8>(W, r, X, i, Y, s, b);
      for (; i + 4 <= i1; i += 4) rows_block<PRECISE, 4>(W, r, X, i, Y, s, b);
      for (; i < i1; ++i) rows_block<PRECISE, 1>(W, r, X, i, Y, s, b);
    }
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

namespace lily::fast {

// Peak rate of the instruction the 4-bit kernels are built on (vpdpbusd, 64 u8·s8 multiply-adds per
// instruction), on registers only: 8 independent accumulator chains per thread.
LILY_AVX512 double vnni_gops_one_thread(double seconds) {
  __m512i acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = _mm512_set1_epi32(i);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  const auto t0 = std::chrono::steady_clock::now();
  long iters = 0;
  double dt = 0;
  do {
    for (int r = 0; r < 4096; ++r)
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    iters += 4096;
    dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } while (dt < seconds);
  __m512i s = acc[0];
  for (int i = 1; i < 8; ++i) s = _mm512_add_epi32(s, acc[i]);
  volatile int sink = _mm512_reduce_add_epi32(s);
  (void)sink;
  return double(iters) * 8 * 64 * 2 / dt / 1e9;  // multiply + add per element
}

}  // namespace lily::fast

#else  // not x86-64: no AVX-512; fast_matmul dispatches to the portable kernel, these are never reached

#include "cpu/fast/q4_kernels.h"

namespace lily::fast {
bool q4_avx512_available() { return false; }
double vnni_gops_one_thread(double) { return 0.0; }
void q4_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  q4_rows_portable(W, r0, r1, X, precise, Y);
}
}  // namespace lily::fast

#endif
