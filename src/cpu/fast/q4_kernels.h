// Row-range kernels for 4-bit affine (group 64, or group 32 with QuantX's halves' sums) matrices against
// quantised activations, in every tier (the prefill's remainder rows of a group-32 matrix, fewer than a 16-row
// tile, run in the portable kernel on every tier).
// Y [n][W.rows]: rows r0..r1 are written for every activation row.
#pragma once
#include "cpu/fast/quant_x.h"
#include "model/weights.h"

namespace lily::fast {

bool q4_avx512_available();
// From this many activation rows on, the AVX-512 kernel multiplies 16 weight rows at a time (a tile GEMM);
// row ranges handed to it should then be multiples of 16 (a remainder falls back to the row-at-a-time loop).
constexpr int kTileMinRows = 4;
// Peak int8 multiply-add rate (GOP/s, one thread) of the VNNI instruction the kernels use.
double vnni_gops_one_thread(double seconds);
void q4_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y);
// 8-bit affine (group % 16 == 0), dense bf16 and dense f32 matrices, decoded in registers, f32 activations X [n, cols].
bool q8_bf16_supported(const QMatrix& W);
void q8_bf16_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y);
// AVX2 + FMA versions (no AVX-512): the same integer sums (vpmaddubsw + vpmaddwd) and float epilogues, results
// bit-identical to the AVX-512 kernels above.
void q4_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y);
void q8_bf16_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y);
// Portable version of the same integer arithmetic (any CPU; also the oracle of the SIMD kernel).
void q4_rows_portable(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y);

}  // namespace lily::fast
