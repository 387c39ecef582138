// 4-bit affine (MLX, group 64; or group 32, GGUF Q4_0 / Q4_1 / Q4_K) matrix x activations with AVX2 + FMA, for
// CPUs without AVX-512 VNNI. The same
// integer arithmetic as the AVX-512 kernel: u8 codes x s8 activations by vpmaddubsw (pair sums |.| <= 2·15·127,
// no saturation; up to 8 of them summed in s16 stay below 32767) and vpmaddwd by ones (s16 pairs -> s32), so the
// per-dword integer sums equal vpdpbusd's exactly. The float epilogues replay the AVX-512 kernel's operations
// lane by lane and its horizontal sums in the same order, so the results are bit-identical to it (tested).
// One group (32 code bytes) per 256-bit register: the AVX-512 kernel's lanes 0-7 / 8-15 (even / odd group of a
// pair) are two registers here. Groups of 32 (SUB = 2): dword lanes 0-3 / 4-7 of a 64-group (elements 0-31 /
// 32-63) take their own scale and Σx, as in the AVX-512 kernel; remainder rows of a prefill go to the portable
// kernel, as there.
#if defined(__x86_64__)
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/avx2_util.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

namespace {


// 8 scales (bf16/f16/f32) from element i, zero past `valid` (valid may be <= 0: all zero)
LILY_AVX2 inline __m256 load8(const void* p, DType t, int64_t i, int valid) {
  if (valid >= 8 && t == DType::BF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(p) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  if (valid >= 8 && t == DType::F32) return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  alignas(32) float v[8];
  for (int k = 0; k < 8; ++k) v[k] = k < valid ? scale_at(p, t, i + k) : 0.0f;
  return _mm256_load_ps(v);
}

LILY_AVX2 inline __m256 loadf8(const float* p, int valid) {
  if (valid >= 8) return _mm256_loadu_ps(p);
  alignas(32) float v[8];
  for (int k = 0; k < 8; ++k) v[k] = k < valid ? p[k] : 0.0f;
  return _mm256_load_ps(v);
}

// Integer dot of one dword lane: Σ lo·xe + Σ hi·xo over its 4 bytes (as one vpdpbusd pair).
LILY_AVX2 inline __m256i dot_u4s8(__m256i lo, __m256i hi, __m256i xe, __m256i xo) {
  const __m256i s = _mm256_add_epi16(_mm256_maddubs_epi16(lo, xe), _mm256_maddubs_epi16(hi, xo));
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

LILY_AVX2 inline __m256i ld(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

template <bool PRECISE>
LILY_AVX2 inline __m256 group_dot(__m256i lo, __m256i hi, const int8_t* xh, const int8_t* xl) {
  __m256 f = _mm256_cvtepi32_ps(dot_u4s8(lo, hi, ld(xh), ld(xh + 64)));
  if constexpr (PRECISE)
    f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u4s8(lo, hi, ld(xl), ld(xl + 64))), _mm256_set1_ps(1.0f / 254.0f), f);
  return f;
}

// Remainder rows (fewer than a 16-row tile) against NB activation rows; acc as the AVX-512 rows_block.
template <bool PRECISE, int NB>
LILY_AVX2 void rows_block(const QMatrix& W, int64_t r, const QuantX& X, int i0, float* Y, const float* s,
                          const float* b) {
  const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * W.row_bytes();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 ae[NB], ao[NB];
  for (int j = 0; j < NB; ++j) ae[j] = ao[j] = _mm256_setzero_ps();
  for (int p = 0; p < X.P; ++p) {
    const bool full = 2 * p + 1 < X.G;
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + p * 64));
    const __m256i lo0 = _mm256_and_si256(w0, m4), hi0 = _mm256_and_si256(_mm256_srli_epi16(w0, 4), m4);
    __m256i lo1 = lo0, hi1 = hi0;
    if (full) {
      const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr + p * 64 + 32));
      lo1 = _mm256_and_si256(w1, m4);
      hi1 = _mm256_and_si256(_mm256_srli_epi16(w1, 4), m4);
    }
    const __m256 se = _mm256_set1_ps(s[2 * p]), so = _mm256_set1_ps(full ? s[2 * p + 1] : 0.0f);
    for (int j = 0; j < NB; ++j) {
      const size_t pi = static_cast<size_t>(i0 + j) * X.P + p;
      const int8_t* xh = &X.hi[pi * 128];
      const int8_t* xl = PRECISE ? &X.lo[pi * 128] : nullptr;
      const __m256 f0 = group_dot<PRECISE>(lo0, hi0, xh, xl);
      ae[j] = _mm256_fmadd_ps(f0, _mm256_mul_ps(se, _mm256_loadu_ps(&X.dx[pi * 16])), ae[j]);
      if (full) {
        const __m256 f1 = group_dot<PRECISE>(lo1, hi1, xh + 32, PRECISE ? xl + 32 : nullptr);
        ao[j] = _mm256_fmadd_ps(f1, _mm256_mul_ps(so, _mm256_loadu_ps(&X.dx[pi * 16 + 8])), ao[j]);
      }
    }
  }
  for (int j = 0; j < NB; ++j) {
    const float* xs = &X.sum[static_cast<size_t>(i0 + j) * X.G];
    const float* r8 = &X.res8[static_cast<size_t>(i0 + j) * X.G];
    float bias = 0.0f;
    for (int g = 0; g < X.G; ++g) bias += b[g] * xs[g] + s[g] * r8[g];  // quant_x.h: res8 centres the codes
    Y[static_cast<size_t>(i0 + j) * W.rows + r] = reduce_add16_avx2(ae[j], ao[j]) + bias;
  }
}

// The AVX-512 gemv_quad's 4 horizontal sums, per 128-bit lane in the same order: rows interleaved, then folded.
LILY_AVX2 inline __m256 fold4(const __m256* a) {
  const __m256 s01 = _mm256_add_ps(_mm256_unpacklo_ps(a[0], a[1]), _mm256_unpackhi_ps(a[0], a[1]));
  const __m256 s23 = _mm256_add_ps(_mm256_unpacklo_ps(a[2], a[3]), _mm256_unpackhi_ps(a[2], a[3]));
  return _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(_mm256_castps_pd(s01), _mm256_castps_pd(s23))),
                       _mm256_castpd_ps(_mm256_unpackhi_pd(_mm256_castps_pd(s01), _mm256_castps_pd(s23))));
}

// One activation row against 4 weight rows (decode), as the AVX-512 gemv_quad (SUB 2: groups of 32).
template <bool PRECISE, int SUB>
LILY_AVX2 void gemv_quad(const QMatrix& W, int64_t r, int nr, const QuantX& X, int i, float* Y) {
  const int G = X.G, NG = G * SUB;  // activation groups (64), weight groups per row
  alignas(32) float sd[4][512 + 16];
  __m256 ae[4], ao[4];
  for (int k = 0; k < 4; ++k) ae[k] = ao[k] = _mm256_setzero_ps();
  alignas(16) float bias[4] = {0, 0, 0, 0};
  const float* dxg = &X.dxg[static_cast<size_t>(i) * G];
  const float* xs = SUB == 2 ? &X.sum32[static_cast<size_t>(i) * NG] : &X.sum[static_cast<size_t>(i) * G];
  const float* r8 = SUB == 2 ? &X.res8_32[static_cast<size_t>(i) * NG] : &X.res8[static_cast<size_t>(i) * G];
  alignas(32) float dx2[512];  // SUB 2: dx of each weight group (its activation group's)
  if constexpr (SUB == 2)
    for (int g = 0; g < NG; ++g) dx2[g] = dxg[g >> 1];
  const float* dxw = SUB == 2 ? dx2 : dxg;
  for (int k = 0; k < nr; ++k) {
    __m256 bacc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // the AVX-512 kernel's lanes 0-7, 8-15
    for (int g = 0; g < NG; g += 16)
      for (int h = 0; h < 2; ++h) {
        const int gh = g + 8 * h, valid = NG - gh;
        const __m256 sv = load8(W.scales, W.sdtype, (r + k) * NG + gh, valid);
        const __m256 bv = load8(W.biases, W.sdtype, (r + k) * NG + gh, valid);
        _mm256_store_ps(&sd[k][gh], _mm256_mul_ps(sv, loadf8(dxw + gh, valid)));
        bacc[h] = _mm256_fmadd_ps(bv, loadf8(xs + gh, valid), bacc[h]);
        bacc[h] = _mm256_fmadd_ps(sv, loadf8(r8 + gh, valid), bacc[h]);  // quant_x.h: res8 centres the codes
      }
    bias[k] = reduce_add16_avx2(bacc[0], bacc[1]);
  }
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  const uint8_t* wr[4];
  for (int k = 0; k < 4; ++k) wr[k] = static_cast<const uint8_t*>(W.w) + (r + (k < nr ? k : 0)) * rb;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const int64_t pf = rb >= 1024 ? 4 * rb : 8192;
  const int8_t* xh = X.hi_at(i);
  const int8_t* xl = PRECISE ? X.lo_at(i) : nullptr;
  for (int p = 0; p < X.P; ++p) {
    const bool full = 2 * p + 1 < G;
    const int8_t* ph = xh + p * 128;
    const int8_t* pl = PRECISE ? xl + p * 128 : nullptr;
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(wr[k] + p * 64 + pf), _MM_HINT_T0);
      const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[k] + p * 64));
      const __m256 f0 = group_dot<PRECISE>(_mm256_and_si256(w0, m4), _mm256_and_si256(_mm256_srli_epi16(w0, 4), m4),
                                           ph, pl);
      // lane l of a 64-group's register takes weight group 2p (+1) (SUB 1) or 4p + l / 4 (+2) (SUB 2)
      const __m256 s0 = SUB == 2 ? _mm256_set_m128(_mm_set1_ps(sd[k][4 * p + 1]), _mm_set1_ps(sd[k][4 * p]))
                                 : _mm256_set1_ps(sd[k][2 * p]);
      ae[k] = _mm256_fmadd_ps(f0, s0, ae[k]);
      if (full) {
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[k] + p * 64 + 32));
        const __m256 f1 = group_dot<PRECISE>(_mm256_and_si256(w1, m4),
                                             _mm256_and_si256(_mm256_srli_epi16(w1, 4), m4), ph + 32,
                                             PRECISE ? pl + 32 : nullptr);
        const __m256 s1 = SUB == 2 ? _mm256_set_m128(_mm_set1_ps(sd[k][4 * p + 3]), _mm_set1_ps(sd[k][4 * p + 2]))
                                   : _mm256_set1_ps(sd[k][2 * p + 1]);
        ao[k] = _mm256_fmadd_ps(f1, s1, ao[k]);
      }
    }
  }
  // the AVX-512 kernel folds its 256-bit halves (even / odd groups), then its 128-bit halves
  const __m256 h = _mm256_add_ps(fold4(ae), fold4(ao));
  const __m128 q = _mm_add_ps(_mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)), _mm_load_ps(bias));
  alignas(16) float out[4];
  _mm_store_ps(out, q);
  for (int k = 0; k < nr; ++k) Y[static_cast<size_t>(i) * W.rows + r + k] = out[k];
}

// ---- Prefill GEMM: 8 weight rows x many activation rows ---------------------------------------------------
// As the AVX-512 tile with 8 rows per register: per group the 8 rows' 32 code bytes are transposed (8x8 dwords)
// so that register q holds dword q of every row; its low nibbles pair with dword q of the activation's even
// block, its high nibbles with the odd block's. vpmaddubsw against the broadcast activation dword, 8 of them
// summed in s16 (low nibbles, then high nibbles), vpmaddwd by ones to s32.
constexpr int kTile8 = 8;
constexpr int kActBlock = 128;

LILY_AVX2 inline void tile_codes(const uint8_t* base, int64_t rb, __m256i* wl, __m256i* wh) {
  __m256i z[8], t[8], u[8];
  for (int k = 0; k < 8; ++k) z[k] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + k * rb));
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_epi32(z[k], z[k + 1]);      // dwords {0,1 | 4,5} of rows k, k+1
    t[k + 1] = _mm256_unpackhi_epi32(z[k], z[k + 1]);  // {2,3 | 6,7}
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_unpacklo_epi64(t[k], t[k + 2]);          // dword {0 | 4} of rows k..k+3
    u[k + 1] = _mm256_unpackhi_epi64(t[k], t[k + 2]);      // {1 | 5}
    u[k + 2] = _mm256_unpacklo_epi64(t[k + 1], t[k + 3]);  // {2 | 6}
    u[k + 3] = _mm256_unpackhi_epi64(t[k + 1], t[k + 3]);  // {3 | 7}
  }
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int c = 0; c < 4; ++c) {
    const __m256i c0 = _mm256_permute2x128_si256(u[c], u[c + 4], 0x20);  // dword c of rows 0..7
    const __m256i c1 = _mm256_permute2x128_si256(u[c], u[c + 4], 0x31);  // dword c + 4
    wl[c] = _mm256_and_si256(c0, m4);
    wh[c] = _mm256_and_si256(_mm256_srli_epi16(c0, 4), m4);
    wl[c + 4] = _mm256_and_si256(c1, m4);
    wh[c + 4] = _mm256_and_si256(_mm256_srli_epi16(c1, 4), m4);
  }
}

// SUB 2: dwords 0-3 and 4-7 (elements 0-31, 32-63) are two weight groups, each summed on its own (sums of 4
// vpmaddubsw in s16) with sv[h], bv[h] and the halves' Σx.
template <bool PRECISE, int NB, int SUB>
LILY_AVX2 inline void tile_act(const __m256i* wl, const __m256i* wh, const QuantX& X, int i, int g, const __m256* sv,
                               const __m256* bv, float* acc) {
  const int8_t* xh[NB];
  const int8_t* xl[NB];
  for (int j = 0; j < NB; ++j) {
    xh[j] = X.hi_at(i + j, g);
    if constexpr (PRECISE) xl[j] = X.lo_at(i + j, g);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  for (int h = 0; h < SUB; ++h) {
    __m256i ih[NB], il[NB];
    for (int j = 0; j < NB; ++j) ih[j] = il[j] = _mm256_setzero_si256();
    const int q0 = h * 8 / SUB, q1 = (h + 1) * 8 / SUB;
    for (int part = 0; part < 2; ++part) {  // low nibbles x even block, then high nibbles x odd block
      const __m256i* w = part ? wh : wl;
      const int xo = part * 64;
      __m256i sh[NB], sl[NB];
#pragma GCC unroll 8
      for (int q = q0; q < q1; ++q)
        for (int j = 0; j < NB; ++j) {
          const __m256i ph = _mm256_maddubs_epi16(w[q], _mm256_set1_epi32(load_i32(xh[j] + xo + 4 * q)));
          sh[j] = q > q0 ? _mm256_add_epi16(sh[j], ph) : ph;
          if constexpr (PRECISE) {
            const __m256i pl = _mm256_maddubs_epi16(w[q], _mm256_set1_epi32(load_i32(xl[j] + xo + 4 * q)));
            sl[j] = q > q0 ? _mm256_add_epi16(sl[j], pl) : pl;
          }
        }
      for (int j = 0; j < NB; ++j) {
        ih[j] = _mm256_add_epi32(ih[j], _mm256_madd_epi16(sh[j], ones));
        if constexpr (PRECISE) il[j] = _mm256_add_epi32(il[j], _mm256_madd_epi16(sl[j], ones));
      }
    }
    for (int j = 0; j < NB; ++j) {
      const size_t gi = static_cast<size_t>(i + j) * X.G + g;
      __m256 f;
      if constexpr (PRECISE)
        f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(il[j]), _mm256_set1_ps(1.0f / 254.0f), _mm256_cvtepi32_ps(ih[j]));
      else
        f = _mm256_cvtepi32_ps(ih[j]);
      const float xs = SUB == 2 ? X.sum32[2 * gi + h] : X.sum[gi], r8 = SUB == 2 ? X.res8_32[2 * gi + h] : X.res8[gi];
      float* a = acc + static_cast<size_t>(j) * kTile8;
      __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(f, _mm256_set1_ps(X.dxg[gi])), sv[h], _mm256_load_ps(a));
      v = _mm256_fmadd_ps(bv[h], _mm256_set1_ps(xs), v);
      _mm256_store_ps(a, _mm256_fmadd_ps(sv[h], _mm256_set1_ps(r8), v));  // quant_x.h: res8 centres the codes
    }
  }
}

// Rows [r, r + 8) against every activation row.
template <bool PRECISE, int SUB>
LILY_AVX2 void tile_rows(const QMatrix& W, int64_t r, const QuantX& X, float* Y) {
  const int G = X.G, NG = G * SUB;
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  alignas(32) float s[512 * kTile8], b[512 * kTile8];  // [weight group][row of the tile]
  for (int k = 0; k < kTile8; ++k)
    for (int g = 0; g < NG; ++g) {
      s[g * kTile8 + k] = scale_at(W.scales, W.sdtype, (r + k) * NG + g);
      b[g * kTile8 + k] = scale_at(W.biases, W.sdtype, (r + k) * NG + g);
    }
  alignas(32) float acc[kActBlock * kTile8];
  const uint8_t* w0 = static_cast<const uint8_t*>(W.w) + r * rb;
  constexpr int NB = PRECISE ? 2 : 4;
  for (int i0 = 0; i0 < X.n; i0 += kActBlock) {
    const int i1 = std::min(X.n, i0 + kActBlock);
    std::memset(acc, 0, sizeof(float) * kTile8 * (i1 - i0));
    for (int g = 0; g < G; ++g) {
      if (!(g & 1) && g + 4 < G)
        for (int k = 0; k < kTile8; ++k)
          _mm_prefetch(reinterpret_cast<const char*>(w0 + k * rb + (g + 4) * 32), _MM_HINT_T0);
      __m256i wl[8], wh[8];
      tile_codes(w0 + g * 32, rb, wl, wh);
      __m256 sv[SUB], bv[SUB];
      for (int h = 0; h < SUB; ++h) {
        sv[h] = _mm256_load_ps(s + (g * SUB + h) * kTile8);
        bv[h] = _mm256_load_ps(b + (g * SUB + h) * kTile8);
      }
      int i = i0;
      for (; i + NB <= i1; i += NB) tile_act<PRECISE, NB, SUB>(wl, wh, X, i, g, sv, bv, acc + (i - i0) * kTile8);
      for (; i < i1; ++i) tile_act<PRECISE, 1, SUB>(wl, wh, X, i, g, sv, bv, acc + (i - i0) * kTile8);
    }
    for (int i = i0; i < i1; ++i)
      _mm256_storeu_ps(Y + static_cast<size_t>(i) * W.rows + r, _mm256_load_ps(acc + (i - i0) * kTile8));
  }
}

template <bool PRECISE>
LILY_AVX2 void rows_impl(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, float* Y) {
  const bool g32 = W.group == 32;
  if (X.n < kTileMinRows) {  // decode: 4 weight rows at a time against each activation row
    for (int64_t r = r0; r < r1; r += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, r1 - r));
      for (int i = 0; i < X.n; ++i) {
        if (g32) gemv_quad<PRECISE, 2>(W, r, nr, X, i, Y);
        else gemv_quad<PRECISE, 1>(W, r, nr, X, i, Y);
      }
    }
    return;
  }
  // the same split as the AVX-512 kernel (16-row tiles, the rest row by row) so that results match it exactly
  for (; r0 + 16 <= r1; r0 += 16) {
    if (g32) {
      tile_rows<PRECISE, 2>(W, r0, X, Y);
      tile_rows<PRECISE, 2>(W, r0 + kTile8, X, Y);
    } else {
      tile_rows<PRECISE, 1>(W, r0, X, Y);
      tile_rows<PRECISE, 1>(W, r0 + kTile8, X, Y);
    }
  }
  if (r0 == r1) return;
  if (g32) {  // the last rows % 16 of a group-32 matrix: the portable kernel (as the AVX-512 kernel does)
    q4_rows_portable(W, r0, r1, X, PRECISE, Y);
    return;
  }
  constexpr int kXBlock = 64;
  float s[256], b[256];
  for (int i0 = 0; i0 < X.n; i0 += kXBlock) {
    const int i1 = std::min(X.n, i0 + kXBlock);
    for (int64_t r = r0; r < r1; ++r) {
      for (int g = 0; g < X.G; ++g) {
        s[g] = scale_at(W.scales, W.sdtype, r * X.G + g);
        b[g] = scale_at(W.biases, W.sdtype, r * X.G + g);
      }
      int i = i0;
      for (; i + 4 <= i1; i += 4) rows_block<PRECISE, 4>(W, r, X, i, Y, s, b);
      for (; i < i1; ++i) rows_block<PRECISE, 1>(W, r, X, i, Y, s, b);
    }
  }
}

}  // namespace

void q4_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  if (precise)
    rows_impl<true>(W, r0, r1, X, Y);
  else
    rows_impl<false>(W, r0, r1, X, Y);
}

}  // namespace lily::fast

#else  // not x86-64: never reached (the ISA is Portable there)

#include "cpu/fast/q4_kernels.h"

namespace lily::fast {
void q4_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  q4_rows_portable(W, r0, r1, X, precise, Y);
}
}  // namespace lily::fast

#endif
