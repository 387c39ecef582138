// ggml block formats: decoders to f32 (the slow reference every GGUF weight path is checked against), the
// lossless repack of Q4_K / Q4_0 / Q4_1 / Q8_0 into lily's affine form, and simple quantisers (writer, synth).
//
// Block layouts (little-endian, "d" an f16 scale):
//   Q4_0 [32]  {d, u8 qs[16]}            x = d*(q-8); q of element j<16 in qs[j]&15, of 16+j in qs[j]>>4
//   Q4_1 [32]  {d, m, u8 qs[16]}         x = d*q + m
//   Q5_0 [32]  {d, u8 qh[4], qs[16]}     q = low nibble as Q4_0 | bit j (elements j) / 16+j of qh as bit 4; x = d*(q-16)
//   Q5_1 [32]  {d, m, qh[4], qs[16]}     x = d*q + m
//   Q8_0 [32]  {d, i8 qs[32]}            x = d*q
//   Q4_K [256] {d, dmin, u8 scales[12], qs[128]}: 8 sub-blocks of 32 with 6-bit scale sc and min m;
//              x = d*sc*q - dmin*m; sub-blocks 2k, 2k+1 share qs[32k..32k+32) (low, high nibble)
//   Q5_K [256] {d, dmin, scales[12], qh[32], qs[128]}: as Q4_K, bit (2k / 2k+1) of qh[l] is bit 4 of q
//   Q6_K [256] {u8 ql[128], qh[64], i8 scales[16], d}: 16 sub-blocks of 16, x = d*scale*(q-32)
//   Q8_K [256] {f32 d, i8 qs[256], i16 bsums[16]}   x = d*q
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/gguf.h"

namespace lily {

// True for the types gguf_dequant_row decodes.
bool gguf_can_decode(uint32_t type);

// Decodes `n` elements (a multiple of the type's block) of ggml `type` starting at `src` into out[0..n).
// Throws lily::Error for a type it does not decode.
void gguf_dequant_row(uint32_t type, const uint8_t* src, int64_t n, float* out);

// 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 packed bytes.
void k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

// Repack into lily's affine form (group 32, f32 scales/biases, u32 words of 4 or 8-bit codes, element k of a
// word in bits [k*bits, (k+1)*bits)); exact: scale*q + bias reproduces the decoder's value for every element.
// `n` elements of one row: writes n*bits/32 words and n/32 scales and biases.
//   Q4_K: scale d*sc, bias -dmin*m, codes q (4 bits)      Q4_0: scale d, bias -8d (4 bits)
//   Q4_1: scale d, bias m (4 bits)                          Q8_0: scale d, bias -128d, codes q+128 (8 bits)
//   Q5_K: as Q4_K with 5-bit codes (8 bits)                 Q5_0: scale d, bias -16d (8 bits)
//   Q5_1: scale d, bias m (8 bits)                          Q8_K: scale d, bias -128d, codes q+128 (8 bits)
// Q6_K (sub-blocks of 16, signed scales) has no exact group-32 form: it stays in its blocks (QMatrix::Kind::Ggml).
// Q4_K / Q5_K also repack with their scales and mins kept as they are stored, in the KS8 form (core/dtype.h): per
// 256-block 12 bytes of scales (f32 d, then the 8 sub-block scales) and 12 of biases (f32 -dmin, then the 8 mins),
// the same values as gguf_repack_row's f32 ones bit for bit, in 0.75 bits per weight instead of 2.
bool gguf_repack_ks8(uint32_t type);
void gguf_repack_row_ks8(uint32_t type, const uint8_t* src, int64_t n, uint32_t* words, uint8_t* scales,
                         uint8_t* biases);
bool gguf_repackable(uint32_t type);
int gguf_repack_bits(uint32_t type);  // 4 or 8
void gguf_repack_row(uint32_t type, const uint8_t* src, int64_t n, uint32_t* words, float* scales, float* biases);

// Q6_K rows as signed 8-bit codes q - 32 (n per row) and f32 scales d * sc (n / 16): scale * code is the decoder's
// value for every element (d * sc is exact in f32). `n` a multiple of 256.
void gguf_q6k_codes_row(const uint8_t* src, int64_t n, int8_t* codes, float* scales);

// Quantisers (round to nearest, simple per-block range; not llama.cpp's search): n a multiple of the block.
std::vector<uint8_t> gguf_quantize(GgmlType type, const float* x, int64_t n);
// The same into out[0..gguf_row_bytes(type, n)) (no allocation; one row of a streamed tensor).
void gguf_quantize_into(GgmlType type, const float* x, int64_t n, uint8_t* out);
// Bytes of n elements of `type` (n a multiple of its block; throws otherwise or for an unknown type).
size_t gguf_row_bytes(GgmlType type, int64_t n);

// f32 -> IEEE half, round to nearest even (scales of the quantised blocks).
uint16_t gguf_f32_to_f16(float f);

}  // namespace lily
