// Dot products of int16 rows (router-from-y's side rows, router_y.cu) with f32 x, dequantised in registers.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace lily::cuda {

// Two int16 (the low half first) as exact floats without the conversion pipe: u = v + 2^15 (the sign bit flipped)
// as the low mantissa bits of 2^23 is the float 2^23 + 2^15 + v.
__device__ __forceinline__ float2 i16x2_to_float2(uint32_t w) {
  const uint32_t u = w ^ 0x80008000u;
  return make_float2(__uint_as_float(__byte_perm(u, 0x4b00u, 0x5410)) - 8421376.f,
                     __uint_as_float(__byte_perm(u, 0x4b00u, 0x5432)) - 8421376.f);
}

// acc + the 8 int16 of w (element order) . x[0..8)
__device__ __forceinline__ float dot8_i16(const uint4& w, const float (&x)[8], float acc) {
  const uint32_t hw[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int t = 0; t < 4; ++t) {
    const float2 f = i16x2_to_float2(hw[t]);
    acc = fmaf(f.x, x[2 * t], acc);
    acc = fmaf(f.y, x[2 * t + 1], acc);
  }
  return acc;
}

}  // namespace lily::cuda
