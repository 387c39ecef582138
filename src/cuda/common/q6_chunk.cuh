// The kQ6 device form of GGUF Q6_K (kernels.h): 16 weights per 16-byte chunk, 6-bit codes q with the f32 scale s
// in the chunk's last word, w = s * (q - 32). The code decoder, the decode kernels' chunk dot and the element
// reader used by the slow paths. Included at the end of device_util.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

// Codes of columns 4G..4G+3 of a chunk as the bytes of one word (byte b: column 4G + b, values 0..63): the low
// nibbles from word G / 2 (bits 0-3 for G even, 4-7 for G odd), the high bits from bits 2G..2G+1 of each byte of
// word 2.
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
  const uint32_t cw[4] = {q6_codes<0>(raw), q6_codes<1>(raw), q6_codes<2>(raw), q6_codes<3>(raw)};
  float a0 = 0.f, a1 = 0.f;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const float4 x0 = lds4(xs, c32, j0 + g);
    a0 = fmaf(x0.x, q8f<0>(cw[g]), a0);
    a1 = fmaf(x0.y, q8f<1>(cw[g]), a1);
    a0 = fmaf(x0.z, q8f<2>(cw[g]), a0);
    a1 = fmaf(x0.w, q8f<3>(cw[g]), a1);
  }
  return __uint_as_float(raw.w) * fmaf(256.f, a0 + a1, -288.f * xsum16[xc]);
}

// Weight j (0..15) of a chunk in f32 (the slow reference reader: dmat_at).
__device__ __forceinline__ float q6_chunk_at(const uint32_t* chunk, int j) {
  const int g = j >> 2, b = j & 3;
  const uint32_t lo = (chunk[g >> 1] >> (8 * b + 4 * (g & 1))) & 15u;
  const uint32_t hi = (chunk[2] >> (8 * b + 2 * g)) & 3u;
  return __uint_as_float(chunk[3]) * float(int(lo | hi << 4) - 32);
}

}  // namespace lily::cuda
