// One affine group's (scale, bias) as two bf16, the form the CUDA backend keeps for every affine matrix (a 32-bit
// word: scale in the low half, bias in the high half; w = scale * q + bias).
//
// bf16 sources (MLX) pass unchanged. Scales kept in f32 (the formats repacked at load: GPTQ / AWQ /
// compressed-tensors int4, GGUF Q4_0 / Q4_1 / Q4_K / Q5_x / Q8_0) are rounded to the nearest bf16, and where the
// bias is an integer multiple of the scale, bias = -z * scale with |z| <= 256 (GPTQ, AWQ and compressed-tensors
// zero points; Q4_0's 8, Q5_0's 16, Q8_0's 128), the bias is -z times the rounded scale, then rounded. So the zero
// point stays on a code: a symmetric format (z a power of two) becomes exactly (q - z) * bf16(scale), the error of
// one bf16 rounding per weight, and an asymmetric one adds at most 2^-9 |z * scale| per group. Rounding the two
// halves on their own instead moves every weight of a Q8_0 group by up to 128 * scale * 2^-9 = scale / 4, a quarter
// of a quantisation step in the same direction. Formats with an independent bias (Q4_K / Q5_K's -dmin * m, Q4_1 /
// Q5_1's m) get both halves rounded to nearest.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace lily {

struct Bf16Pair {
  uint16_t scale = 0, bias = 0;
  uint32_t word() const { return uint32_t(scale) | (uint32_t(bias) << 16); }
};

inline Bf16Pair affine_pair_bf16(float scale, float bias) {
  Bf16Pair p;
  p.scale = f32_to_bf16(scale);
  p.bias = f32_to_bf16(bias);
  if (scale == 0.0f || !std::isfinite(scale) || !std::isfinite(bias)) return p;
  const float z = std::nearbyint(-bias / scale);
  if (std::fabs(z) <= 256.0f && -z * scale == bias) p.bias = f32_to_bf16(-z * bf16_to_f32(p.scale));
  return p;
}

// The pair of group i of an affine matrix's scales/biases of type t (BF16 kept bit for bit).
inline Bf16Pair affine_pair_at(const void* scales, const void* biases, DType t, size_t i) {
  if (t == DType::BF16) {
    Bf16Pair p;
    std::memcpy(&p.scale, static_cast<const uint8_t*>(scales) + 2 * i, 2);
    std::memcpy(&p.bias, static_cast<const uint8_t*>(biases) + 2 * i, 2);
    return p;
  }
  return affine_pair_bf16(decode_scalar(scales, t, i), decode_scalar(biases, t, i));
}

// Whether a group's bias is -z * scale with an integer zero z in 0..zmax (z gets it; a zero scale needs a zero bias).
inline bool zero_point(float scale, float bias, float zmax, uint32_t* z) {
  if (!std::isfinite(scale) || !std::isfinite(bias)) return false;
  if (scale == 0.0f) {
    if (bias != 0.0f) return false;
    *z = 0;
    return true;
  }
  const float zf = std::nearbyint(-bias / scale);
  if (!(zf >= 0.0f && zf <= zmax) || -zf * scale != bias) return false;
  *z = uint32_t(zf);
  return true;
}
// kQ4Z, the CUDA backend's exact form of a group whose bias is -z * scale with an integer zero z in 0..15 (GPTQ, AWQ
// and compressed-tensors int4 after their repack): one 32-bit word, the f32 scale rounded to nearest (ties to even)
// on its 19 upper mantissa bits, z in the 4 lowest bits. Decoded as scale = bits(word & ~0xf), bias = -(word & 0xf)
// * scale: relative error of the scale at most 2^-20 (bf16: 2^-9). Fails (false) where the group is not of that
// form or the rounded scale is not finite.
inline bool q4z_zero(float scale, float bias, uint32_t* z) { return zero_point(scale, bias, 15.0f, z); }
inline bool q4z_word(float scale, float bias, uint32_t* word) {
  uint32_t z = 0;
  if (!q4z_zero(scale, bias, &z)) return false;
  uint32_t u;
  std::memcpy(&u, &scale, 4);
  u = (u + 7u + ((u >> 4) & 1u)) & ~0xfu;  // round to nearest even on bit 4 (a carry into the exponent is right)
  if ((u & 0x7f800000u) == 0x7f800000u) return false;
  *word = u | z;
  return true;
}
// Whether the n groups of an affine 4-bit matrix's scales / biases of type t take kQ4Z: scales wider than bf16
// (with bf16 scales and biases the bf16 pair is already exact: MLX) and every group of q4z_word's form.
inline bool affine_q4z(const void* scales, const void* biases, DType t, size_t n) {
  if (t == DType::BF16 || !scales || !biases) return false;
  uint32_t w = 0;
  for (size_t i = 0; i < n; ++i)
    if (!q4z_word(decode_scalar(scales, t, i), decode_scalar(biases, t, i), &w)) return false;
  return true;
}
// kQ4H / kQ8H, the CUDA backend's form of an affine matrix whose scales and biases are wider than bf16 and not of
// the zero-point forms kQ4Z / kI8 (GGUF Q4_1, Q4_K; Q5_1, Q5_K as 8-bit codes: an independent bias): both halves
// rounded to the nearest fp16 in one word (scale low, bias high), a relative error of at most 2^-11 against bf16's
// 2^-8 for values from 2^-14 (fp16's smallest normal) up, an absolute one of at most 2^-25 below (fp16 subnormals:
// Q4_K's smallest sub-block scales, d * 1, fall there in layers of small weights).
// Whether v's fp16 is zero or a normal (f16_pair_half's inline path).
inline bool f16_pair_value_ok(float v) {
  const float a = std::fabs(v);  // below 65520 rounds to at most 65504 (NaN and infinities fail both tests)
  return a == 0.0f || (a >= 0x1p-14f && a < 65520.0f);
}
// v as fp16, rounded to nearest even: inline for zero and normal results (a billion values in a Q4_K_M file's
// experts), f32_to_f16 for the others.
inline uint16_t f16_pair_half(float v) {
  if (!f16_pair_value_ok(v)) return f32_to_f16(v);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  u &= 0x7fffffffu;
  if (u == 0) return uint16_t(sign);
  u += 0xfffu + ((u >> 13) & 1u);                        // round the 13 dropped mantissa bits to nearest even
  return uint16_t(sign | ((u - 0x38000000u) >> 13));     // exponent bias 127 -> 15
}
inline uint32_t f16_pair_word(float scale, float bias) {
  return uint32_t(f16_pair_half(scale)) | (uint32_t(f16_pair_half(bias)) << 16);
}
// Whether the n groups of scales / biases of type t take fp16 pairs: not bf16 (those keep their exact bf16 pair),
// every value finite and below 65520 (no overflow), and the largest scale an fp16 normal (at least 2^-14), so that
// the subnormals' absolute error, 2^-25, is at most 2^-11 of the matrix's largest scale, the normals' own relative
// precision (a matrix of tiny weights keeps bf16's relative precision instead).
inline bool affine_f16_pairs(const void* scales, const void* biases, DType t, size_t n) {
  if (t == DType::BF16 || !scales || !biases) return false;
  float smax = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float sc = std::fabs(decode_scalar(scales, t, i)), bi = std::fabs(decode_scalar(biases, t, i));
    if (!(sc < 65520.0f) || !(bi < 65520.0f)) return false;
    smax = std::max(smax, sc);
  }
  return smax >= 0x1p-14f;
}

// Whether an affine 8-bit group's bias is -z * scale with an integer zero z in 0..255 (GGUF Q8_0 after its repack:
// z = 128, Q5_0: z = 16; the CUDA backend then keeps the codes as int8 q - z with the f32 scale: kI8, exact).
inline bool i8z_zero(float scale, float bias, uint32_t* z) { return zero_point(scale, bias, 255.0f, z); }

// Whether every group of an affine 8-bit matrix (rows x cols codes packed 4 per little-endian u32 word, `group`
// columns per scale) has a zero point (i8z_zero) with every code minus z an int8: the CUDA backend's kI8 form
// (int8 codes q - z with the f32 scale, exact). Scales of type bf16 are left to the bf16 pairs (already exact).
inline bool affine_i8z(const void* w, const void* scales, const void* biases, DType t, int64_t rows, int64_t cols,
                       int group) {
  if (!w || !scales || !biases || t == DType::BF16 || t == DType::KS8 || group <= 0 || group % 16 || cols % group)
    return false;
  const int64_t gpr = cols / group;
  const auto* wu = static_cast<const uint32_t*>(w);
  const auto* sf = t == DType::F32 ? static_cast<const float*>(scales) : nullptr;  // f32: read directly
  const auto* bf = t == DType::F32 ? static_cast<const float*>(biases) : nullptr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < gpr; ++g) {
      uint32_t z = 0;
      const size_t gi = size_t(r * gpr + g);
      const float sc = sf ? sf[gi] : decode_scalar(scales, t, gi), bi = bf ? bf[gi] : decode_scalar(biases, t, gi);
      // z = 128 (Q8_0): every code 0..255 minus 128 is an int8, no scan (the general test below gives the same)
      if (sc != 0.0f && std::isfinite(sc) && bi == -128.0f * sc) continue;
      if (!i8z_zero(sc, bi, &z)) return false;
      if (z == 128) continue;
      for (int64_t c = g * group; c < (g + 1) * group; ++c) {
        const int u = int((wu[(r * cols + c) / 4] >> (8 * (c % 4))) & 255u) - int(z);
        if (u < -128 || u > 127) return false;
      }
    }
  return true;
}

// The kQ4Z word's (scale, bias), as the device decodes them.
inline void q4z_decode(uint32_t word, float* scale, float* bias) {
  const uint32_t u = word & ~0xfu;
  std::memcpy(scale, &u, 4);
  *bias = -float(word & 0xfu) * *scale;
}

}  // namespace lily
