// The kQ6 device form of GGUF Q6_K (kernels.h): 16 weights per 16-byte chunk, 6-bit codes q with the f32 scale s
// in the chunk's last word, w = s * (q - 32). The code decoder, the decode kernels' chunk dots (f32 x and the int8
// x of XQ) and the element reader used by the slow paths. Included at the end of device_util.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

// Codes of code word G as the bytes of one word (values 0..63), byte b holding column 2b + G (G 0, 1) or
// 8 + 2b + (G - 2) (G 2, 3): the low nibbles from word G / 2 (bits 0-3 of each byte for G even, 4-7 for G odd: the
// 4-bit formats' nibble order, so that the words meet XQ's int8 x as they are), the high bits from bits 2G..2G+1 of
// each byte of word 2.
template <int G>
__device__ __forceinline__ uint32_t q6_codes(const uint4& raw) {
  const uint32_t lo = ((G < 2 ? raw.x : raw.y) >> (4 * (G & 1))) & 0x0f0f0f0fu;
  const uint32_t hi = (G < 3 ? raw.z << (4 - 2 * G) : raw.z >> 2) & 0x30303030u;
  return lo | hi;
}

// Sum_i w_i x_i over one chunk: s * Sum(x (q - 32)) with Sum(x q) = 256 (Sum(x f) - Sum(x)), f = 1 + q / 256 (q8f).
template <>
__device__ __forceinline__ float chunk_dot<kQ6>(uint4 raw, uint32_t, const float* xs, const float* xsum16, int xc) {
  const int c32 = xc >> 1, j0 = (xc & 1) * 4;
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // columns 8h .. 8h + 7: code words 2h (even columns) and 2h + 1 (odd columns)
    const uint32_t ce = h ? q6_codes<2>(raw) : q6_codes<0>(raw), co = h ? q6_codes<3>(raw) : q6_codes<1>(raw);
    const float4 x0 = lds4(xs, c32, j0 + 2 * h), x1 = lds4(xs, c32, j0 + 2 * h + 1);
    a0 = fmaf(x0.x, q8f<0>(ce), a0);
    a1 = fmaf(x0.y, q8f<0>(co), a1);
    a0 = fmaf(x0.z, q8f<1>(ce), a0);
    a1 = fmaf(x0.w, q8f<1>(co), a1);
    a0 = fmaf(x1.x, q8f<2>(ce), a0);
    a1 = fmaf(x1.y, q8f<2>(co), a1);
    a0 = fmaf(x1.z, q8f<3>(ce), a0);
    a1 = fmaf(x1.w, q8f<3>(co), a1);
  }
  return __uint_as_float(raw.w) * fmaf(256.f, a0 + a1, -288.f * xsum16[xc]);
}

// The codes of a word minus 32 as signed bytes (-32..31) without carries between bytes: (q + 0x60) stays below 0x100
// and its bit 7 is then flipped (q + 0x60 - 0x80 = q - 32).
__device__ __forceinline__ int q6_signed(uint32_t c) { return int((c + 0x60606060u) ^ 0x80808080u); }

// Against XQ's int8 x (chunk xc of 16 columns = half xc & 1 of XQ's 32-column chunk xc >> 1, whose int4 words hold
// that half's columns 0, 2, 4, 6 | 1, 3, 5, 7 | 8, 10, 12, 14 | 9, 11, 13, 15: code words 0..3). 8 dp4a give the
// exact int32 sums of (q - 32) * hi and (q - 32) * lo; 254 * hi-sum + lo-sum <= 16 * 32 * 127 * 255 < 2^24, so the
// float conversion is exact; times the chunk's x step and s.
template <>
__device__ __forceinline__ float XQ::dot<kQ6>(uint4 raw, uint32_t, int xc) const {
  const int c = xc >> 1, slot = (xc & 1) * nch + c;
  const int4 h = xh[slot], l = xl[slot];
  const int w0 = q6_signed(q6_codes<0>(raw)), w1 = q6_signed(q6_codes<1>(raw));
  const int w2 = q6_signed(q6_codes<2>(raw)), w3 = q6_signed(q6_codes<3>(raw));
  int sh = __dp4a(w0, h.x, 0), sl = __dp4a(w0, l.x, 0);
  sh = __dp4a(w1, h.y, sh);
  sl = __dp4a(w1, l.y, sl);
  sh = __dp4a(w2, h.z, sh);
  sl = __dp4a(w2, l.z, sl);
  sh = __dp4a(w3, h.w, sh);
  sl = __dp4a(w3, l.w, sl);
  return __uint_as_float(raw.w) * (float(sh * 254 + sl) * d[c]);
}

// Weight j (0..15) of a chunk in f32 (the slow reference reader: dmat_at).
__device__ __forceinline__ float q6_chunk_at(const uint32_t* chunk, int j) {
  const int G = (j >> 3) * 2 + (j & 1), b = (j & 7) >> 1;  // code word and byte of column j
  const uint32_t lo = (chunk[j >> 3] >> (4 * (j & 7))) & 15u;
  const uint32_t hi = (chunk[2] >> (8 * b + 2 * G)) & 3u;
  return __uint_as_float(chunk[3]) * float(int(lo | hi << 4) - 32);
}

}  // namespace lily::cuda
