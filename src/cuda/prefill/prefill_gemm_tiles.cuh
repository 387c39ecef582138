// Tile pieces shared by the prefill GEMM kernels (prefill_gemm.cu: k_gemm / k_gemm_v2 with mma.sync,
// prefill_gemm_wg.cu: k_gemm_wg with wgmma): the block's rows (dense or the grouped tile map), and a thread's
// share of a W tile (32 consecutive k of tile row threadIdx.x / 2) loaded as packed words one or two k-tiles ahead
// and dequantised in registers to 16-bit operands (affine s * q + b, or s * code for the 8-bit-code formats and kQ6:
// e4m3, int8 and 6-bit codes are exact in f32, the product is rounded once to the operand type). Included by .cu files only (device code, internal linkage).
#pragma once
#include <cstdint>
#include <string>

#include "core/error.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kBN = 128, kBK = 64, kSK = kBK + 8;  // smem row stride in bf16 (144 bytes: ldmatrix conflict-free)
constexpr int kThreads = 256;

// Grid of the GEMM kernels: by default blockIdx.x is the column tile (128 W rows; 64 output columns of
// kGemmSiluMul) and blockIdx.y the row tile, so that the column tiles of one row tile run side by side and share its
// A rows in L2; GemmArgs::rows_first swaps them (row tiles side by side sharing a W tile), the faster order for
// short prompts (docs/performance-log.md).
__device__ __forceinline__ int col_tile(const GemmArgs& g) { return int(g.rows_first ? blockIdx.y : blockIdx.x); }
__device__ __forceinline__ int row_tile(const GemmArgs& g) { return int(g.rows_first ? blockIdx.x : blockIdx.y); }
inline dim3 gemm_grid(const GemmArgs& g, int row_tiles, int col_tiles) {
  const unsigned r = unsigned(row_tiles), c = unsigned(col_tiles);
  const unsigned y = g.rows_first ? c : r;
  if (y > 65535u) throw Error("prefill_gemm: " + std::to_string(y) + " tiles exceed the grid");
  return g.rows_first ? dim3(r, c) : dim3(c, r);
}

// The rows this block multiplies: grouped mode reads (expert, first row, end row) from the device tile map
// (false: past the tiles the routing produced), dense mode takes rows [row_tile(g) * tile_m, +tile_m) of [0, M).
__device__ __forceinline__ bool block_rows(const GemmArgs& g, int tile_m, int64_t& e, int& r0, int& r1) {
  e = 0;
  if (g.tiles) {
    if (row_tile(g) >= *g.n_tiles) return false;
    const int* t = g.tiles + 3 * row_tile(g);
    e = t[0];
    r0 = t[1];
    r1 = t[2];
  } else {
    r0 = row_tile(g) * tile_m;
    r1 = min(g.M, r0 + tile_m);
  }
  return true;
}

__device__ __forceinline__ const uint8_t* mat_w(const DMat& m, int64_t e, int64_t ws) { return m.w + e * ws; }

// Per-thread share of a W tile: 32 consecutive k of one tile row (thread t: row t/2, half t%2).
template <int PREC>
__device__ __forceinline__ uint32_t pack_w(float lo, float hi) {
  if constexpr (PREC == kPrecBF16) return pack_bf2(lo, hi);
  else return pack_h2(lo, hi);
}

// 8 nibbles (k = 0..7 of the word, nibble i at bits 4i) -> fp16 (q - z) for k pairs (0,1) (2,3) (4,5) (6,7), exact,
// without float conversions: OR-ing a nibble into the mantissa of 1024 (0x6400) gives the fp16 1024 + q (nibble at
// bits 0-3 of a half) or 1024 + 16 q (bits 4-7); a permute pairs neighbours, and one fma with (1, 1/16) and
// (-1024 - z, -64 - z) gives q - z exactly (integers below 2048 are exact in fp16).
__device__ __forceinline__ void q4_fp16_pairs(uint32_t x, float z, __half2 (&q)[4]) {
  const uint32_t y = x >> 8;
  const uint32_t h04 = (x & 0x000F000Fu) | 0x64006400u, h15 = (x & 0x00F000F0u) | 0x64006400u;
  const uint32_t h26 = (y & 0x000F000Fu) | 0x64006400u, h37 = (y & 0x00F000F0u) | 0x64006400u;
  const uint32_t p[4] = {__byte_perm(h04, h15, 0x5410), __byte_perm(h26, h37, 0x5410), __byte_perm(h04, h15, 0x7632),
                         __byte_perm(h26, h37, 0x7632)};
  const __half2 unit = __halves2half2(__float2half_rn(1.f), __float2half_rn(0.0625f));
  const __half2 off = __halves2half2(__float2half_rn(-1024.f - z), __float2half_rn(-64.f - z));
#pragma unroll
  for (int i = 0; i < 4; ++i) q[i] = __hfma2(*reinterpret_cast<const __half2*>(&p[i]), unit, off);
}
// The fp16 operands s * q + b (kQ4 / kQ4H: one fma rounds once, as the f32 fma + fp16 rounding it replaces, where s
// and b, bf16 or fp16 in the sb word, are fp16 normals) or s * (q - z) (kQ4Z: the exact q - z times the fp16 scale, one
// rounding, where s * q + b with b = -z * s rounded on its own would lose up to 15 half-ulps of s). A product beyond
// the fp16 range would be inf, not saturated: 4-bit weights of real checkpoints are far below 65504.
template <int FMT>
__device__ __forceinline__ uint4 q4_fp16x8(uint32_t x, uint32_t sb) {
  const __half2 s2 = __float2half2_rn(sb_scale<FMT>(sb));
  __half2 q[4];
  uint32_t o[4];
  if constexpr (FMT == kQ4Z) {
    q4_fp16_pairs(x, float(sb & 0xfu), q);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 w = __hmul2(q[i], s2);
      o[i] = *reinterpret_cast<const uint32_t*>(&w);
    }
  } else {
    q4_fp16_pairs(x, 0.f, q);
    const __half2 b2 = __float2half2_rn(sb_bias<FMT>(sb));
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2 w = __hfma2(q[i], s2, b2);
      o[i] = *reinterpret_cast<const uint32_t*>(&w);
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

// 16 codes (two words) of an 8-bit-code format (kF8 / kI8) times the f32 scale s as 8 packed 16-bit operand pairs
// (each product rounded once, as the affine forms' s * q + b).
template <int FMT, int PREC>
__device__ __forceinline__ uint4 code8_x8(uint32_t w0, uint32_t w1, float s) {
  return make_uint4(pack_w<PREC>(s * code8f<FMT, 0>(w0), s * code8f<FMT, 1>(w0)),
                    pack_w<PREC>(s * code8f<FMT, 2>(w0), s * code8f<FMT, 3>(w0)),
                    pack_w<PREC>(s * code8f<FMT, 0>(w1), s * code8f<FMT, 1>(w1)),
                    pack_w<PREC>(s * code8f<FMT, 2>(w1), s * code8f<FMT, 3>(w1)));
}

// 16 codes of a kQ6 chunk times its f32 scale as 8 packed 16-bit operand pairs: columns 0-7 (H = 0) or 8-15
// (H = 1); q - 32 = 256 f - 288 exactly (f = 1 + q / 256), the product rounded once as the other forms'.
template <int H, int PREC>
__device__ __forceinline__ uint4 q6_x8(const uint4& raw) {
  const float s = __uint_as_float(raw.w);
  const uint32_t a = q6_codes<2 * H>(raw), b = q6_codes<2 * H + 1>(raw);  // even / odd columns of the eight
  auto v = [s](float f) { return s * fmaf(256.f, f, -288.f); };
  return make_uint4(pack_w<PREC>(v(q8f<0>(a)), v(q8f<0>(b))), pack_w<PREC>(v(q8f<1>(a)), v(q8f<1>(b))),
                    pack_w<PREC>(v(q8f<2>(a)), v(q8f<2>(b))), pack_w<PREC>(v(q8f<3>(a)), v(q8f<3>(b))));
}

template <int FMT, int PREC>
struct BTile {
  static constexpr int kU4 = fmt_q4(FMT) ? 1 : FMT == kBF16 ? 4 : 2;  // 16-byte words per 32 elements
  static constexpr int kBits = fmt_q4(FMT) ? 4 : FMT == kBF16 ? 16 : 8;
  uint4 raw[kU4];
  uint32_t sb = 0;
  const uint8_t* w = nullptr;      // row start (null: row out of range)
  const uint32_t* sbr = nullptr;   // row's (scale, bias) words, or f32 scales
  int group = 64;

  __device__ __forceinline__ void load(int k0) {
    if (!w) return;
    const int k = k0 + (threadIdx.x & 1) * 32;
#pragma unroll
    for (int u = 0; u < kU4; ++u) raw[u] = ldg_stream(w + (int64_t(k) * kBits) / 8 + u * 16);
    if constexpr (fmt_sb(FMT)) {
      sb = __ldg(sbr + k / group);
    }
  }
  // This thread's 32 weights of the tile (k0 of the last load .. +31) as 16-bit operands, 4 x 8 (zeros past the
  // matrix).
  __device__ __forceinline__ void dequant(uint4 (&dst)[4]) const {
    if (!w) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = make_uint4(0, 0, 0, 0);
      return;
    }
    if constexpr (FMT == kBF16 && PREC == kPrecBF16) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = raw[i];
    } else if constexpr (FMT == kBF16) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dst[i] = make_uint4(bf2_to_h2(raw[i].x), bf2_to_h2(raw[i].y), bf2_to_h2(raw[i].z), bf2_to_h2(raw[i].w));
    } else if constexpr (fmt_q4(FMT) && PREC != kPrecBF16) {
      const uint32_t wv[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = q4_fp16x8<FMT>(wv[i], sb);
    } else if constexpr (fmt_q4(FMT)) {
      const float s16 = 16.f * sb_scale<FMT>(sb), b = sb_bias<FMT>(sb) - s16;
      const uint32_t wv[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t x = wv[i];
        dst[i] = make_uint4(pack_w<PREC>(fmaf(s16, q4f<0>(x), b), fmaf(s16, q4f<1>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<2>(x), b), fmaf(s16, q4f<3>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<4>(x), b), fmaf(s16, q4f<5>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<6>(x), b), fmaf(s16, q4f<7>(x), b)));
      }
    } else if constexpr (FMT == kQ6) {
      dst[0] = q6_x8<0, PREC>(raw[0]);
      dst[1] = q6_x8<1, PREC>(raw[0]);
      dst[2] = q6_x8<0, PREC>(raw[1]);
      dst[3] = q6_x8<1, PREC>(raw[1]);
    } else if constexpr (FMT == kF8 || FMT == kI8) {
      const float s0 = __uint_as_float(sb);  // one group for the 32 weights (group % 32 == 0)
      dst[0] = code8_x8<FMT, PREC>(raw[0].x, raw[0].y, s0);
      dst[1] = code8_x8<FMT, PREC>(raw[0].z, raw[0].w, s0);
      dst[2] = code8_x8<FMT, PREC>(raw[1].x, raw[1].y, s0);
      dst[3] = code8_x8<FMT, PREC>(raw[1].z, raw[1].w, s0);
    } else {
      const float s256 = 256.f * sb_scale<FMT>(sb), b = sb_bias<FMT>(sb) - s256;  // kQ8 / kQ8H
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t wv[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          dst[u * 2 + i] = make_uint4(pack_w<PREC>(fmaf(s256, q8f<0>(wv[2 * i]), b), fmaf(s256, q8f<1>(wv[2 * i]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<2>(wv[2 * i]), b), fmaf(s256, q8f<3>(wv[2 * i]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<0>(wv[2 * i + 1]), b),
                                               fmaf(s256, q8f<1>(wv[2 * i + 1]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<2>(wv[2 * i + 1]), b),
                                               fmaf(s256, q8f<3>(wv[2 * i + 1]), b)));
        }
      }
    }
  }
  // ... stored to row threadIdx.x / 2 of the padded [kBN][kSK] tile Bs (k half threadIdx.x % 2)
  __device__ __forceinline__ void store(uint16_t* Bs) const {
    uint4 v[4];
    dequant(v);
    uint4* dst = reinterpret_cast<uint4*>(Bs + (threadIdx.x >> 1) * kSK + (threadIdx.x & 1) * 32);
#pragma unroll
    for (int i = 0; i < 4; ++i) dst[i] = v[i];
  }
};

// Binds bt to this thread's W row: tile row t/2 of the block's 128 (kGemmSiluMul: rows 32j..32j+15 are gate
// rows 16j.., 32j+16..32j+31 the up rows of the same columns); w stays null past the matrix.
template <int MODE, int FMT, int PREC>
__device__ __forceinline__ void bind_w_row(BTile<FMT, PREC>& bt, const GemmArgs& g, int64_t e) {
  const int r = threadIdx.x >> 1;
  const DMat* m = &g.W0;
  int row;
  if constexpr (MODE == kGemmSiluMul) {
    if (r & 16) m = &g.W1;
    row = col_tile(g) * 64 + (r >> 5) * 16 + (r & 15);
  } else {
    row = col_tile(g) * kBN + r;
  }
  if (row < m->rows) {
    bt.w = mat_w(*m, e, g.w_stride) + int64_t(row) * m->row_bytes;
    if constexpr (fmt_sb(FMT)) bt.sbr = m->sb + e * g.sb_stride + int64_t(row) * m->sb_row;
    bt.group = m->group;
  }
}

// The epilogue's per-row operand scale (fp16 modes: the power of two of A's row, indexed after the gather).
template <int PREC>
__device__ __forceinline__ float row_scale(const GemmArgs& g, int r) {
  if constexpr (PREC == kPrecBF16) return 1.f;
  else return g.a_scale[g.a_rows ? g.a_rows[r] : r];
}
// Output element (r, c) per MODE: kGemmSiluMul from the scaled gate gv and up uv (bf16 to Cb, or f32 to C), else
// the scaled accumulator gv stored to or added into C.
template <int MODE>
__device__ __forceinline__ void put_out(const GemmArgs& g, int r, int c, float gv, float uv) {
  if constexpr (MODE == kGemmSiluMul) {
    if (g.Cb) g.Cb[int64_t(r) * g.ldc + c] = f2bf(silu_f(gv) * uv);
    else g.C[int64_t(r) * g.ldc + c] = silu_f(gv) * uv;
  } else {
    float* p = g.C + int64_t(r) * g.ldc + c;
    if constexpr (MODE == kGemmAdd) *p += gv;
    else *p = gv;
  }
}

}  // namespace
}  // namespace lily::cuda
