// GGUF Q6_K matrices (QMatrix::Kind::Ggml, kept in their blocks) against the quantised activations of the 4-bit
// kernels (QuantX: x/dx ≈ hi + lo/254 per group of 64, outliers taken out), AVX-512 VNNI. Each weight row is
// unpacked once per task chunk into 6-bit codes q (one byte each, 0..63) laid out as QuantX lays out a pair of
// groups ([g even 32 | g+1 even 32 | g odd 32 | g+1 odd 32]), and its sub-block scales d·sc (exact in f32) spread
// over the 16 dword lanes of a pair. Then per pair: vpdpbusd of the even and the odd bytes gives lane l the sum of
// q·xq over 8 consecutive elements (elements 8(l % 8) .. of group g + l / 8, inside sub-block (l / 8)·4 + (l % 8) / 2
// of the pair's 128), minus 32·Σxq of those elements (precomputed per activation row), so Σ (q - 32)·xq is exact in
// int32; y += (d·sc)·dx·(that + lo part / 254). Prefill (4 or more activation rows) takes 16 weight rows at a time
// in a tile GEMM as the 4-bit kernels do (below). The outliers' x·w are added in f32 from the blocks.
// GCC 12 reports a false maybe-uninitialized inside its own AVX-512 intrinsic headers (_mm512_undefined_*).
#if defined(__x86_64__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "cpu/fast/q6k_kernels.h"

namespace lily::fast {

#define LILY_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace {

constexpr int kBlockBytes = 210;  // ql[128], qh[64], int8 scales[16], f16 d

// 32 codes (0..63) of quarter t (elements 32t .. 32t + 31) of a half: ql low (t 0, 1) or high (t 2, 3) nibbles of
// ql[32 (t & 1) ..], bits 2t, 2t+1 of qh as bits 4, 5.
LILY_AVX512 inline __m256i quarter(__m256i l0, __m256i l1, __m256i h, int t) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
  const __m256i l = (t & 1) ? l1 : l0;
  const __m256i lo = t < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(h, 2 * t), m3);
  return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));  // hi < 4: no carry across bytes
}

// 32 bytes -> [16 even-position bytes | 16 odd-position bytes]
LILY_AVX512 inline __m256i split_even_odd(__m256i v) {
  const __m256i sh = _mm256_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14,
                                      1, 3, 5, 7, 9, 11, 13, 15);
  return _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, sh), 0xD8);  // qwords 0, 2, 1, 3
}

// One row: codes in the pair layout (cols bytes) and per pair 16 lane scales (cols / 8 floats).
LILY_AVX512 void unpack_row(const uint8_t* p, int64_t cols, uint8_t* codes, float* lanes) {
  const __m512i lane_sub = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  for (int64_t b = 0; b < cols / 256; ++b, p += kBlockBytes) {
    uint16_t dh;
    std::memcpy(&dh, p + 208, 2);
    const __m512 d = _mm512_set1_ps(f16_to_f32(dh));
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
    const __m512 sc = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));  // d·sc of the 16 sub-blocks
    for (int half = 0; half < 2; ++half) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + half * 64));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + half * 64 + 32));
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + half * 32));
      const __m256i d0 = split_even_odd(quarter(l0, l1, h, 0)), d1 = split_even_odd(quarter(l0, l1, h, 1));
      const __m256i d2 = split_even_odd(quarter(l0, l1, h, 2)), d3 = split_even_odd(quarter(l0, l1, h, 3));
      uint8_t* o = codes + (b * 2 + half) * 128;
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(d0, d1, 0x20));       // g even
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32), _mm256_permute2x128_si256(d2, d3, 0x20));  // g+1 even
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 64), _mm256_permute2x128_si256(d0, d1, 0x31));  // g odd
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 96), _mm256_permute2x128_si256(d2, d3, 0x31));  // g+1 odd
      const __m512i idx = _mm512_add_epi32(lane_sub, _mm512_set1_epi32(8 * half));
      _mm512_storeu_ps(lanes + (b * 2 + half) * 16, _mm512_permutexvar_ps(idx, sc));
    }
  }
}

// Element c of a Q6_K row, decoded as gguf_dequant_row does (d·sc·(q - 32)).
inline float element(const uint8_t* row, int64_t c) {
  const uint8_t* p = row + (c / 256) * kBlockBytes;
  const int e = int(c % 256), half = e / 128, w = e % 128, t = w / 32, l = w % 32;
  const uint8_t lo = p[half * 64 + l + (t & 1) * 32];
  const int q = (t < 2 ? (lo & 15) : (lo >> 4)) | (((p[128 + half * 32 + l] >> (2 * t)) & 3) << 4);
  uint16_t dh;
  std::memcpy(&dh, p + 208, 2);
  return f16_to_f32(dh) * float(int8_t(p[192 + e / 16])) * float(q - 32);
}

LILY_AVX512 inline float reduce(__m512 v) { return _mm512_reduce_add_ps(v); }

// ---- Prefill: 16 weight rows x every activation row ------------------------------------------------------
// As the 4-bit tile GEMM: per group of 64 the 16 rows' even-element and odd-element code bytes (32 each, the pair
// layout) are transposed in registers so that E[q] / O[q] hold dword q of every row (lane k = row k); one vpdpbusd
// with the activation's dword q broadcast adds 4 products for all 16 rows. Sub-block s of the group (elements
// 16s .. 16s + 15) is dwords 2s, 2s + 1 of both blocks: its sum minus 32·Σxq of its elements, times dx and the 16
// rows' d·sc, goes into y[16].
constexpr int kTile = 16;
constexpr int kActBlock = 128;

// 16 rows' 32 bytes (row k at base + k·stride) -> c[q] = dword q of every row, q = 0..7.
LILY_AVX512 inline void transpose16x8(const uint8_t* base, int64_t stride, __m512i* c) {
  static constexpr int a[8] = {0, 1, 2, 3, 8, 9, 10, 11};
  __m512i z[8], t[8], u[8];
  for (int j = 0; j < 8; ++j) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + a[j] * stride));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + (a[j] + 4) * stride));
    z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
  for (int j = 0; j < 8; j += 2) {
    t[j] = _mm512_unpacklo_epi32(z[j], z[j + 1]);
    t[j + 1] = _mm512_unpackhi_epi32(z[j], z[j + 1]);
  }
  for (int j = 0; j < 8; j += 4) {
    u[j] = _mm512_unpacklo_epi64(t[j], t[j + 2]);
    u[j + 1] = _mm512_unpackhi_epi64(t[j], t[j + 2]);
    u[j + 2] = _mm512_unpacklo_epi64(t[j + 1], t[j + 3]);
    u[j + 3] = _mm512_unpackhi_epi64(t[j + 1], t[j + 3]);
  }
  for (int q = 0; q < 4; ++q) {
    c[q] = _mm512_shuffle_i32x4(u[q], u[q + 4], 0x88);
    c[q + 4] = _mm512_shuffle_i32x4(u[q], u[q + 4], 0xDD);
  }
}

// Rows [c0, c0 + 16) (unpacked in codes / subs: [16][cols] bytes, [cols / 16][16] scales) against every activation
// row.
template <bool PRECISE>
LILY_AVX512 void tile_rows(const uint8_t* codes, const float* subs, int64_t cols, const QuantX& X,
                           const int32_t* corr, int64_t c0, int64_t rows, float* Y) {
  const int G = X.G, P = X.P;
  alignas(64) float acc[kActBlock * kTile];
  for (int i0 = 0; i0 < X.n; i0 += kActBlock) {
    const int i1 = std::min(X.n, i0 + kActBlock);
    std::memset(acc, 0, sizeof(float) * kTile * size_t(i1 - i0));
    for (int g = 0; g < G; ++g) {
      const int p = g >> 1, h = g & 1;
      __m512i E[8], O[8];
      transpose16x8(codes + size_t(p) * 128 + size_t(h) * 32, cols, E);
      transpose16x8(codes + size_t(p) * 128 + 64 + size_t(h) * 32, cols, O);
      __m512 sv[4];
      for (int sb = 0; sb < 4; ++sb) sv[sb] = _mm512_load_ps(subs + size_t(g * 4 + sb) * kTile);
      for (int i = i0; i < i1; ++i) {
        const int8_t* xe = X.hi_at(i, g);
        const int8_t* xo = xe + 64;
        const int32_t* ci = corr + (size_t(i) * P + p) * 32 + h * 8;  // lanes of group g: 8 elements each
        const float dx = X.dxg[size_t(i) * G + g];
        float* a = acc + size_t(i - i0) * kTile;
        __m512 v = _mm512_load_ps(a);
        for (int sb = 0; sb < 4; ++sb) {
          const int q = 2 * sb;
          __m512i ih = _mm512_dpbusd_epi32(_mm512_setzero_si512(), E[q], _mm512_set1_epi32(load_i32(xe + 4 * q)));
          ih = _mm512_dpbusd_epi32(ih, E[q + 1], _mm512_set1_epi32(load_i32(xe + 4 * q + 4)));
          ih = _mm512_dpbusd_epi32(ih, O[q], _mm512_set1_epi32(load_i32(xo + 4 * q)));
          ih = _mm512_dpbusd_epi32(ih, O[q + 1], _mm512_set1_epi32(load_i32(xo + 4 * q + 4)));
          __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(ih, _mm512_set1_epi32(ci[q] + ci[q + 1])));
          if constexpr (PRECISE) {
            const int8_t* le = X.lo_at(i, g);
            const int8_t* lo = le + 64;
            __m512i il = _mm512_dpbusd_epi32(_mm512_setzero_si512(), E[q], _mm512_set1_epi32(load_i32(le + 4 * q)));
            il = _mm512_dpbusd_epi32(il, E[q + 1], _mm512_set1_epi32(load_i32(le + 4 * q + 4)));
            il = _mm512_dpbusd_epi32(il, O[q], _mm512_set1_epi32(load_i32(lo + 4 * q)));
            il = _mm512_dpbusd_epi32(il, O[q + 1], _mm512_set1_epi32(load_i32(lo + 4 * q + 4)));
            const int32_t cl = ci[16 + q] + ci[16 + q + 1];
            f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(il, _mm512_set1_epi32(cl))),
                                _mm512_set1_ps(1.0f / 254.0f), f);
          }
          v = _mm512_fmadd_ps(_mm512_mul_ps(f, _mm512_set1_ps(dx)), sv[sb], v);
        }
        _mm512_store_ps(a, v);
      }
    }
    for (int i = i0; i < i1; ++i) {
      float* y = Y + size_t(i) * size_t(rows) + size_t(c0);
      _mm512_storeu_ps(y, _mm512_load_ps(acc + size_t(i - i0) * kTile));
    }
  }
}

// ---- Decode (one activation row): the codes rebuilt in registers in element order --------------------------
// The activation's codes are put in element order once per call (the pair layout's even and odd bytes interleaved),
// with -32·Σxq of every 4 elements. Per 128-element half of a block and weight row: ql's 64 bytes give the low
// nibbles of elements 0..63 (low halves of the bytes) and 64..127 (high halves); qh's 32 bytes, broadcast to both
// 256-bit halves and shifted per half (16-bit lanes by 4 / 2, and by 0 / 2), put the two high bits of each element
// at bits 4-5 of the same byte. vpdpbusd of the two code vectors, started at -32·Σxq, gives lane l the exact
// Σ(q - 32)·xq of elements 4l..4l+3 and 64+4l..64+4l+3: sub-blocks l/4 and 4 + l/4 of the half, whose d·sc·dx are
// picked from the block's 16 lanes. 4 weight rows per activation load.
struct NaturalX {
  std::vector<int8_t> hi, lo;   // [P][128] the activation codes of each 128 elements in element order
  std::vector<int32_t> neg;     // [P][4][16] -32·Σxq per 4 elements: hi of elements 0..63, of 64..127, then lo
  std::vector<float> dx;        // [P / 2][16] lane s: dx of the block's sub-block s (its group s / 4)
};

LILY_AVX512 void natural_x(const QuantX& X, bool precise, NaturalX& N) {
  const int P = X.P;
  N.hi.resize(size_t(P) * 128);
  N.lo.resize(size_t(P) * 128);
  N.neg.resize(size_t(P) * 64);
  N.dx.resize(size_t(P / 2) * 16);
  const __m512i k32 = _mm512_set1_epi8(32);
  for (int part = 0; part < 2; ++part) {
    if (part == 1 && !precise) break;  // the lo codes are not read (and may be another call's)
    const int8_t* src = part ? X.lo_at(0) : X.hi_at(0);
    int8_t* dst = part ? N.lo.data() : N.hi.data();
    for (int p = 0; p < P; ++p)
      for (int g = 0; g < 2; ++g) {  // group 2p + g: even elements at 32g, odd ones at 64 + 32g
        const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + size_t(p) * 128 + 32 * g));
        const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + size_t(p) * 128 + 64 + 32 * g));
        const __m256i a = _mm256_unpacklo_epi8(e, o), b = _mm256_unpackhi_epi8(e, o);
        int8_t* d = dst + size_t(p) * 128 + 64 * g;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d), _mm256_permute2x128_si256(a, b, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + 32), _mm256_permute2x128_si256(a, b, 0x31));
      }
    for (int p = 0; p < P; ++p)
      for (int g = 0; g < 2; ++g) {
        const __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32,
                                              _mm512_loadu_si512(dst + size_t(p) * 128 + 64 * g));
        _mm512_storeu_si512(&N.neg[size_t(p) * 64 + size_t(part) * 32 + size_t(g) * 16],
                            _mm512_sub_epi32(_mm512_setzero_si512(), c));
      }
  }
  for (int b = 0; b < P / 2; ++b)
    for (int s = 0; s < 16; ++s) N.dx[size_t(b) * 16 + size_t(s)] = X.dxg[size_t(b) * 4 + size_t(s / 4)];
}

template <bool PRECISE>
LILY_AVX512 void gemv_natural(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, float* Y) {
  const int64_t cols = W.cols, nb = cols / 256, rb = static_cast<int64_t>(W.row_bytes());
  thread_local NaturalX N;
  natural_x(X, PRECISE, N);
  const uint8_t* base = static_cast<const uint8_t*>(W.w);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  // qh bits of elements 0..31 | 32..63 (shifted left by 4 | 2), of 64..95 | 96..127 (right by 0 | 2)
  const __m512i mha = _mm512_inserti64x4(_mm512_set1_epi8(0x03), _mm256_set1_epi8(0x0C), 1);
  const __m512i mhb = _mm512_inserti64x4(_mm512_set1_epi8(0x30), _mm256_set1_epi8(char(0xC0)), 1);
  const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);  // qh bits 0-1 | 2-3
  const __m512i shr = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);  // qh bits 4-5 | 6-7
  const __m512i quad = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const int64_t pf = 4 * rb;  // the next quad of rows: 4 short streams, too short for the hardware prefetcher
  for (int64_t k0 = r0; k0 < r1; k0 += 4) {
    const int nr = int(std::min<int64_t>(4, r1 - k0));
    const uint8_t* rp[4];  // rows past r1 repeat the last one (their sums are dropped)
    for (int k = 0; k < 4; ++k) rp[k] = base + std::min<int64_t>(k0 + k, r1 - 1) * rb;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t b = 0; b < nb; ++b) {
      const __m512 dx = _mm512_loadu_ps(&N.dx[size_t(b) * 16]);
      __m512 sc[4];
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const uint8_t* p = rp[k] + b * kBlockBytes;
        _mm_prefetch(reinterpret_cast<const char*>(p + pf), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + pf + 64), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + pf + 128), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + pf + 192), _MM_HINT_T0);
        int16_t dh;
        std::memcpy(&dh, p + 208, 2);
        const __m512 d = _mm512_cvtph_ps(_mm256_set1_epi16(dh));  // exact, in registers (no call in this loop)
        const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 192));
        sc[k] = _mm512_mul_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)));
      }
      for (int h = 0; h < 2; ++h) {
        const int64_t pr = b * 2 + h;
        const __m512i xa = _mm512_loadu_si512(&N.hi[size_t(pr) * 128]), xb = _mm512_loadu_si512(&N.hi[size_t(pr) * 128 + 64]);
        const __m512i na = _mm512_loadu_si512(&N.neg[size_t(pr) * 64]), nb16 = _mm512_loadu_si512(&N.neg[size_t(pr) * 64 + 16]);
        __m512i la, lb, nla, nlb;
        if constexpr (PRECISE) {
          la = _mm512_loadu_si512(&N.lo[size_t(pr) * 128]);
          lb = _mm512_loadu_si512(&N.lo[size_t(pr) * 128 + 64]);
          nla = _mm512_loadu_si512(&N.neg[size_t(pr) * 64 + 32]);
          nlb = _mm512_loadu_si512(&N.neg[size_t(pr) * 64 + 48]);
        }
        const __m512i ia = _mm512_add_epi32(quad, _mm512_set1_epi32(8 * h)), ib = _mm512_add_epi32(ia, _mm512_set1_epi32(4));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const uint8_t* p = rp[k] + b * kBlockBytes;
          const __m512i l = _mm512_loadu_si512(p + h * 64);
          const __m512i hb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 128 + h * 32)));
          // the high bits masked before the shifts, so nothing else lands in a byte: (l & 0x0F) | h in one ternlog
          const __m512i ha = _mm512_sllv_epi16(_mm512_and_si512(hb, mha), shl);
          const __m512i hb2 = _mm512_srlv_epi16(_mm512_and_si512(hb, mhb), shr);
          const __m512i qa = _mm512_ternarylogic_epi32(l, ha, m4, 0xEC);  // (a & c) | b
          const __m512i qb = _mm512_ternarylogic_epi32(_mm512_srli_epi16(l, 4), hb2, m4, 0xEC);
          __m512 fa = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(na, qa, xa));
          __m512 fb = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nb16, qb, xb));
          if constexpr (PRECISE) {
            const __m512 inv = _mm512_set1_ps(1.0f / 254.0f);
            fa = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nla, qa, la)), inv, fa);
            fb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nlb, qb, lb)), inv, fb);
          }
          acc[k] = _mm512_fmadd_ps(fa, _mm512_permutexvar_ps(ia, sc[k]), acc[k]);
          acc[k] = _mm512_fmadd_ps(fb, _mm512_permutexvar_ps(ib, sc[k]), acc[k]);
        }
      }
    }
    for (int k = 0; k < nr; ++k) {
      float y = reduce(acc[k]);
      const uint8_t* row = base + (k0 + k) * rb;
      for (int j = 0; j < X.n_out[0]; ++j)  // the outliers, kept out of the codes, in f32
        y += X.out_val[size_t(j)] * element(row, X.out_col[size_t(j)]);
      Y[size_t(k0 + k)] = y;
    }
  }
}

template <bool PRECISE>
LILY_AVX512 void rows_impl(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, float* Y) {
  if (X.n == 1) {
    gemv_natural<PRECISE>(W, r0, r1, X, Y);
    return;
  }
  const int64_t cols = W.cols;
  const int P = X.P;  // pairs of 64-groups = cols / 128
  const int64_t rb = static_cast<int64_t>(W.row_bytes());
  // 32·Σxq per lane (the 8 elements lane l covers), per activation row and pair: [n][P][16] (hi, then lo)
  thread_local std::vector<int32_t> corr;
  corr.resize(size_t(X.n) * size_t(P) * 32);
  const __m512i k32 = _mm512_set1_epi8(32);
  for (int i = 0; i < X.n; ++i)
    for (int p = 0; p < P; ++p) {
      const int8_t* xh = X.hi_at(i) + size_t(p) * 128;
      __m512i c = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, _mm512_loadu_si512(xh));
      c = _mm512_dpbusd_epi32(c, k32, _mm512_loadu_si512(xh + 64));
      _mm512_storeu_si512(&corr[(size_t(i) * P + p) * 32], c);
      if constexpr (PRECISE) {
        const int8_t* xl = X.lo_at(i) + size_t(p) * 128;
        __m512i cl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k32, _mm512_loadu_si512(xl));
        cl = _mm512_dpbusd_epi32(cl, k32, _mm512_loadu_si512(xl + 64));
        _mm512_storeu_si512(&corr[(size_t(i) * P + p) * 32 + 16], cl);
      }
    }
  const int64_t chunk = X.n < 4 ? 4 : kTile;  // rows unpacked at a time (a multiple of 4)
  thread_local std::vector<uint8_t> codes;
  thread_local std::vector<float> lanes;
  codes.resize(size_t(chunk * cols));
  lanes.resize(size_t(chunk * cols / 8));
  for (int64_t c0 = r0; c0 < r1; c0 += chunk) {
    const int64_t nr = std::min(chunk, r1 - c0);
    for (int64_t k = 0; k < chunk; ++k) {  // rows past r1: zero codes and scales (their sums are dropped)
      if (k < nr) {
        unpack_row(static_cast<const uint8_t*>(W.w) + (c0 + k) * rb, cols, &codes[size_t(k * cols)],
                   &lanes[size_t(k * cols / 8)]);
      } else {
        std::memset(&codes[size_t(k * cols)], 0, size_t(cols));
        std::memset(&lanes[size_t(k * cols / 8)], 0, size_t(cols / 8) * sizeof(float));
      }
    }
    if (X.n >= 4 && nr == kTile) {  // prefill: the tile GEMM, then the outliers
      thread_local std::vector<float> subs;
      subs.resize(size_t(cols / 16) * kTile + 16);
      float* sub = subs.data() + (16 - (reinterpret_cast<uintptr_t>(subs.data()) / 4) % 16) % 16;  // 64-byte aligned
      for (int64_t k = 0; k < kTile; ++k) {
        const uint8_t* p = static_cast<const uint8_t*>(W.w) + (c0 + k) * rb;
        for (int64_t b = 0; b < cols / 256; ++b, p += kBlockBytes) {
          uint16_t dh;
          std::memcpy(&dh, p + 208, 2);
          const float d = f16_to_f32(dh);
          for (int j = 0; j < 16; ++j) sub[size_t(b * 16 + j) * kTile + size_t(k)] = d * float(int8_t(p[192 + j]));
        }
      }
      tile_rows<PRECISE>(codes.data(), sub, cols, X, corr.data(), c0, W.rows, Y);
      for (int i = 0; i < X.n; ++i) {
        const int no = X.n_out[size_t(i)];
        for (int64_t k = 0; k < kTile && no > 0; ++k) {
          const uint8_t* row = static_cast<const uint8_t*>(W.w) + (c0 + k) * rb;
          float y = 0.0f;
          for (int j = 0; j < no; ++j)
            y += X.out_val[size_t(i) * kMaxOutliers + size_t(j)] *
                 element(row, X.out_col[size_t(i) * kMaxOutliers + size_t(j)]);
          Y[size_t(i) * size_t(W.rows) + size_t(c0 + k)] += y;
        }
      }
      continue;
    }
    for (int i = 0; i < X.n; ++i) {
      const int8_t* xh = X.hi_at(i);
      const int8_t* xl = PRECISE ? X.lo_at(i) : nullptr;
      const int32_t* ci = &corr[size_t(i) * P * 32];
      const float* dx = &X.dx[size_t(i) * P * 16];
      for (int64_t k0 = 0; k0 < nr; k0 += 4) {
        __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int p = 0; p < P; ++p) {
          const __m512i xe = _mm512_loadu_si512(xh + size_t(p) * 128), xo = _mm512_loadu_si512(xh + size_t(p) * 128 + 64);
          const __m512i ch = _mm512_loadu_si512(ci + size_t(p) * 32);
          __m512i le, lo, cl;
          if constexpr (PRECISE) {
            le = _mm512_loadu_si512(xl + size_t(p) * 128);
            lo = _mm512_loadu_si512(xl + size_t(p) * 128 + 64);
            cl = _mm512_loadu_si512(ci + size_t(p) * 32 + 16);
          }
          const __m512 dxv = _mm512_loadu_ps(dx + size_t(p) * 16);
#pragma GCC unroll 4
          for (int k = 0; k < 4; ++k) {
            const uint8_t* w = &codes[size_t((k0 + k) * cols) + size_t(p) * 128];
            const __m512i we = _mm512_loadu_si512(w), wo = _mm512_loadu_si512(w + 64);
            __m512i ih = _mm512_dpbusd_epi32(_mm512_setzero_si512(), we, xe);
            ih = _mm512_sub_epi32(_mm512_dpbusd_epi32(ih, wo, xo), ch);
            __m512 f = _mm512_cvtepi32_ps(ih);
            if constexpr (PRECISE) {
              __m512i il = _mm512_dpbusd_epi32(_mm512_setzero_si512(), we, le);
              il = _mm512_sub_epi32(_mm512_dpbusd_epi32(il, wo, lo), cl);
              f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(il), _mm512_set1_ps(1.0f / 254.0f), f);
            }
            const __m512 sv = _mm512_loadu_ps(&lanes[size_t((k0 + k) * cols / 8) + size_t(p) * 16]);
            acc[k] = _mm512_fmadd_ps(f, _mm512_mul_ps(sv, dxv), acc[k]);
          }
        }
        for (int k = 0; k < 4 && k0 + k < nr; ++k) {
          float y = reduce(acc[k]);
          const int no = X.n_out[size_t(i)];
          const uint8_t* row = static_cast<const uint8_t*>(W.w) + (c0 + k0 + k) * rb;
          for (int j = 0; j < no; ++j)  // the outliers, kept out of the codes, in f32
            y += X.out_val[size_t(i) * kMaxOutliers + size_t(j)] *
                 element(row, X.out_col[size_t(i) * kMaxOutliers + size_t(j)]);
          Y[size_t(i) * size_t(W.rows) + size_t(c0 + k0 + k)] = y;
        }
      }
    }
  }
}

}  // namespace

bool q6k_int_supported(const QMatrix& W) { return q6k_supported(W) && W.cols / 64 <= 256; }

void q6k_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  if (precise)
    rows_impl<true>(W, r0, r1, X, Y);
  else
    rows_impl<false>(W, r0, r1, X, Y);
}

}  // namespace lily::fast

#else  // not x86-64: never called (fast_matmul takes the generic path there)

#include <cstdlib>

#include "cpu/fast/q6k_kernels.h"

namespace lily::fast {
bool q6k_int_supported(const QMatrix&) { return false; }
void q6k_rows_avx512(const QMatrix&, int64_t, int64_t, const QuantX&, bool, float*) { std::abort(); }
}  // namespace lily::fast

#endif
