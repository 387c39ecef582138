// The device form of a checkpoint matrix (DMat in decode/kernels.h) and its copy to the device, shared by the
// backend's upload and the kernel tests (which go through the same path as a loaded model).
#pragma once
#include <cstddef>
#include <cstdint>

#include "cuda/decode/kernels.h"
#include "model/weights.h"

namespace lily::cuda {

// The device layout of q (pointers left null): affine 4/8-bit with any group that is a multiple of 32 dividing
// cols (scales of any type); FP8 e4m3 blocks as kF8 (the codes as stored, the block scale per row and 128 columns
// in f32); GGUF Q6_K blocks as kQ6 (6-bit codes with the f32 scale d * sc of each 16 columns: exact); dense
// matrices (and any other GGUF blocks) as BF16. Throws naming `what` for any other matrix.
// widen8: an affine 4-bit q gets 8-bit codes instead (the same scales and biases: exact), so that it can share a
// kernel with 8-bit matrices (the MoE projections of mixed recipes).
// An affine 4-bit q whose scales are wider than bf16 (f16 / f32) and every group's bias is exactly -z * scale in f32
// with an integer z in 0..15 (GPTQ, AWQ and compressed-tensors int4 after their repack; GGUF Q4_0) is kQ4Z: the
// f32 scale to 2^-20 with z in its low bits (model/affine_pair.h q4z_word), exact where a bf16 pair is not;
// Another affine q with scales wider than bf16 (GGUF Q4_1, Q4_K; Q5_1, Q5_K as 8-bit codes) is kQ4H / kQ8H, an fp16
// (scale, bias) pair, where its values fit (model/affine_pair.h affine_f16_pairs). `refine` says which of these
// forms q may take (kRefineExact: kQ4Z / kI8; kRefineHalf: kQ4H / kQ8H): matrices a kernel must read in one format
// get the form all of them can take.
enum Refine : int { kRefineNone = 0, kRefineExact = 1, kRefineHalf = 2, kRefineAll = 3 };
DMat describe_matrix(const QMatrix& q, const char* what, bool widen8 = false, int refine = kRefineAll);
bool q4z_matrix(const QMatrix& q);  // whether an affine 4-bit q takes kQ4Z
bool h16_matrix(const QMatrix& q);  // whether an affine q's pairs fit fp16 (kQ4H / kQ8H)
bool i8z_matrix(const QMatrix& q);  // whether an affine 8-bit q takes kI8 (int8 codes q - z, f32 scales)
// Whether q is uploaded in its exact zero-point form (kQ4Z, or kI8 for 8-bit and widened codes) when allowed.
bool exact_form(const QMatrix& q, bool widen8);
// Whether q is uploaded as kQ4H / kQ8H when allowed (widened or not).
bool half_form(const QMatrix& q, bool widen8);

size_t dmat_w_bytes(const DMat& m);   // bytes of the packed rows / bf16 elements
size_t dmat_sb_words(const DMat& m);  // (scale, bias) words

// Copies q into dw (packed rows, 8-bit codes, kQ6 chunks, or bf16: dense types rounded to nearest) and dsb (one word
// per group: affine_pair_at's bf16 scale and bias, model/affine_pair.h; q4z_word's word for kQ4Z; f16_pair_word's
// for kQ4H; the f32 scale for
// kF8 / kI8; none for kQ6 and kBF16).
void copy_matrix(const QMatrix& q, const DMat& m, uint8_t* dw, uint32_t* dsb);

// One kQ6 chunk (kernels.h) from 16 codes q - 32 (-32..31) and their scale; and weight i (0..15) of a chunk in f32,
// as the kernels read it.
void q6_chunk(const int8_t* codes, float scale, uint8_t* chunk);
float q6_chunk_value(const uint8_t* chunk, int i);

}  // namespace lily::cuda
