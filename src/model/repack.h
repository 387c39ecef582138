// Lossless conversions of quantised weight formats into the two affine forms the kernels run (MLX affine 4-bit
// group 64 and 8-bit codes), done once at load. Each takes one matrix [rows=out, cols=in] and writes:
//  codes: 4-bit: [rows][cols/2] bytes, element j in bits 4*(j%8) of little-endian u32 word j/8 (MLX's layout);
//         8-bit: [rows][cols] bytes.
//  scales/biases: [rows][cols/out_group] f32, w = scale*q + bias; exact for every input (f16/bf16/f32 scales
//         times integers of at most 8 bits, and -z*s with z < 256, are exact in f32).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace lily {

// MLX affine codes of any width (2..8, as a per-row little-endian bit stream) -> 8-bit codes, one byte each.
void repack_bits_to_u8(const uint8_t* src, int bits, int64_t rows, int64_t cols, uint8_t* dst);

// The source of an int4 GPTQ / AWQ / compressed-tensors matrix (pointers into the checkpoint, any alignment).
struct Int4Source {
  enum class Format { Gptq, Awq, PackQuantized };
  Format format = Format::Gptq;
  int64_t rows = 0, cols = 0, group = 0;  // out, in, input channels per group
  // Gptq: qweight I32 [cols/8, rows] (packed along the input: element i at bits 4*(i%8) of word i/8),
  //       qzeros I32 [cols/group, rows/8] (output o at bits 4*(o%8)), stored zero = z - 1 unless zeros_plus_one
  //       is false (checkpoint_format gptq_v2), scales [cols/group, rows].
  // Awq:  qweight I32 [cols, rows/8] (packed along the output, AutoAWQ's interleave: nibble k of a word holds
  //       output 8w + {0,2,4,6,1,3,5,7}[k]), qzeros I32 [cols/group, rows/8] (same interleave, stored as is),
  //       scales [cols/group, rows].
  // PackQuantized (compressed-tensors): weight_packed I32 [rows, cols/8] (element j at bits 4*(j%8), stored
  //       q + 8), weight_scale [rows, cols/group]; zero point: none (symmetric: 8), or weight_zero_point
  //       I32 [rows/8, cols/group] packed along the output (stored zp + 8) or I8 [rows, cols/group] (signed zp).
  const uint8_t* qweight = nullptr;
  const uint8_t* qzeros = nullptr;  // null: symmetric (PackQuantized only)
  DType zdtype = DType::I32;        // PackQuantized: I32 packed or I8 signed
  const uint8_t* scales = nullptr;
  DType sdtype = DType::F16;
  bool zeros_plus_one = true;       // Gptq v1 stores z - 1
};

// Writes the MLX affine 4-bit group-64 form (group 128 sources repeat each scale/bias twice: same values).
// `codes` [rows][cols/2], `scales`/`biases` f32 [rows][cols/64]. Requires cols % 64 == 0, rows % 8 == 0 and
// group a multiple of 64 (checked by the caller).
void repack_int4(const Int4Source& s, uint8_t* codes, float* scales, float* biases);

}  // namespace lily
