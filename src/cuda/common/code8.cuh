// The device formats with 8-bit codes, an f32 scale per group and no bias (kernels.h: kF8, e4m3 codes of the FP8
// checkpoints, group 128; kI8, signed int8 codes q - z of GGUF Q8_0 / Q5_0 and other zero-point 8-bit codes): the
// code decoders, the chunk dots of the decode kernels, and every format's element reader for the slow paths
// (embedding rows, the simple GEMM, load-time products).
// Included at the end of device_util.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

// e4m3 byte K of w as f32, exactly: the byte moved to the top of a word and shifted right by 4 (arithmetic) puts
// its sign at bit 31, its exponent in the low 4 exponent bits and its mantissa in the top 3 mantissa bits, i.e. the
// f32 with the value 2^-120 times the e4m3 value (normal and subnormal codes alike: e4m3 exponent 0 lands on the f32
// subnormals, which the build keeps: no flush to zero); the product with 2^120 is exact. The NaN codes (0x7f, 0xff)
// read as +-480 (checkpoints hold none).
template <int K>
__device__ __forceinline__ float f8f(uint32_t w) {
  const int t = K == 3 ? int(w) : int(w << (24 - 8 * K));
  return __int_as_float((t >> 4) & int(0x87f00000u)) * 0x1p120f;
}
__device__ __forceinline__ float f8_byte_f(uint32_t b) {
  return __int_as_float((int(b << 24) >> 4) & int(0x87f00000u)) * 0x1p120f;
}
// Signed byte K of w as f32 (exact; sbyte_f in device_util.cuh takes w ^ 0x80808080).
template <int K>
__device__ __forceinline__ float i8f(uint32_t w) {
  return sbyte_f(w ^ 0x80808080u, K);
}
// Code K of a word in format FMT (kF8 / kI8) as f32.
template <int FMT, int K>
__device__ __forceinline__ float code8f(uint32_t w) {
  static_assert(FMT == kF8 || FMT == kI8, "8-bit-code formats only");
  if constexpr (FMT == kF8) return f8f<K>(w);
  else return i8f<K>(w);
}

// Sum_i w_i x_i over a 16-element chunk of 8-bit codes: s * Sum(code_i x_i) (s: the f32 bits in sb).
template <int FMT>
__device__ __forceinline__ float chunk_dot_code8(uint4 raw, uint32_t sb, const float* xs, int xc) {
  const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
  const int c32 = xc >> 1, j0 = (xc & 1) * 4;
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float4 x0 = lds4(xs, c32, j0 + i);
    a0 = fmaf(x0.x, code8f<FMT, 0>(wv[i]), a0);
    a1 = fmaf(x0.y, code8f<FMT, 1>(wv[i]), a1);
    a0 = fmaf(x0.z, code8f<FMT, 2>(wv[i]), a0);
    a1 = fmaf(x0.w, code8f<FMT, 3>(wv[i]), a1);
  }
  return __uint_as_float(sb) * (a0 + a1);
}
template <>
__device__ __forceinline__ float chunk_dot<kF8>(uint4 raw, uint32_t sb, const float* xs, const float*, int xc) {
  return chunk_dot_code8<kF8>(raw, sb, xs, xc);
}
template <>
__device__ __forceinline__ float chunk_dot<kI8>(uint4 raw, uint32_t sb, const float* xs, const float*, int xc) {
  return chunk_dot_code8<kI8>(raw, sb, xs, xc);
}

// Element (r, c) of m in f32, w and sb the matrix's (or an expert's) arrays: the slow reference reader of every
// format (embedding rows, the simple prefill GEMM, the router-from-y products at load).
__device__ __forceinline__ float dmat_at(const DMat& m, const uint8_t* w, const uint32_t* sb, int64_t r, int c) {
  const uint8_t* row = w + r * m.row_bytes;
  if (m.fmt == kBF16) return bf2f(reinterpret_cast<const uint16_t*>(row)[c]);
  if (m.fmt == kQ6) return q6_chunk_at(reinterpret_cast<const uint32_t*>(row + (c / 16) * 16), c % 16);
  const uint32_t s = sb[r * m.sb_row + c / m.group];
  if (m.fmt == kF8) return __uint_as_float(s) * f8_byte_f(row[c]);
  if (m.fmt == kI8) return __uint_as_float(s) * float(int8_t(row[c]));
  const uint32_t* wr = reinterpret_cast<const uint32_t*>(row);
  const uint32_t q = fmt_q4(m.fmt) ? (wr[c / 8] >> (4 * (c % 8))) & 15u : (wr[c / 4] >> (8 * (c % 4))) & 255u;
  if (m.fmt == kQ4Z) return sb_scale<kQ4Z>(s) * float(q) + sb_bias<kQ4Z>(s);
  if (m.fmt == kQ4H || m.fmt == kQ8H) return sb_scale<kQ4H>(s) * float(q) + sb_bias<kQ4H>(s);  // fp16 pairs
  return bf_lo(s) * float(q) + bf_hi(s);
}

}  // namespace lily::cuda
