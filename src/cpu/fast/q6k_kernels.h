// GGUF Q6_K matrices kept in their blocks (QMatrix::Kind::Ggml): rows r0..r1 of Y [n][W.rows].
//  q6k_rows_avx512: against the quantised activations of the 4-bit kernels (QuantX, outliers included), AVX-512
//    VNNI (the avx512 tier): integer sums of the 6-bit codes, exact d·sc scales; within the activations'
//    quantisation of the f32 product, as the 4-bit kernels.
//  q6k_rows_avx2: against f32 activations X [n, cols], AVX2 + FMA (the avx2 tier): rows decoded exactly to f32;
//    equal to the f32 product of the decoded rows up to summation order.
// The portable tier and the reference decode rows with gguf_dequant_row.
#pragma once
#include <cstdint>

#include "cpu/fast/quant_x.h"
#include "model/weights.h"

namespace lily::fast {

bool q6k_supported(const QMatrix& W);      // Q6_K blocks, whole 256-blocks per row
bool q6k_int_supported(const QMatrix& W);  // q6k_supported, at most 256 activation groups a row (QuantX's limit)
void q6k_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y);
void q6k_rows_avx2(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int n, float* Y);

}  // namespace lily::fast
