// The "device twin" of a loaded model: every affine matrix whose scales are not bf16 gets new f32 scale/bias
// arrays holding what the CUDA backend stores for it (model/affine_pair.h): for 4-bit matrices with zero points
// (GPTQ / AWQ / compressed-tensors int4: kQ4Z) the f32 scale to 2^-20 and its exact bias -z * scale, for other
// ones whose values fit fp16 (GGUF Q4_1, Q4_K: kQ4H; Q5_1, Q5_K: kQ8H) the fp16 pair, else the bf16 pair (naive: the
// bf16 pairs for all); 8-bit ones with zero points (GGUF Q8_0 / Q5_0: kI8) are shared (exact), every GGUF block matrix the backend
// widens (any but Q6_K) and every dense F32 / F16 matrix (GGUF's router and shared-expert gate are F32) get the bf16
// rows the backend uploads for it (cuda/weight_upload.cpp), everything else is shared (FP8 blocks and Q6_K are kept
// exactly: codes with f32 scales). The CPU reference path on the twin computes what the CUDA kernels should compute,
// so CUDA tests compare against it at the kernels' own bounds, and CPU tests measure what the pairs cost against the
// exact repack.
#pragma once
#include <memory>
#include <vector>

#include "io/gguf.h"
#include "model/affine_pair.h"
#include "model/weights.h"
#include "quant_test_util.h"

namespace lily_test {

// Returns the twin; `changed` (optional) receives the number of matrices given new pairs. naive: both halves rounded
// to nearest on their own instead (what affine_pair_bf16 improves on; for comparison only). keep_dense: dense F32 /
// F16 matrices shared instead of rounded (what the twin was before it rounded them; for comparison only).
inline std::shared_ptr<lily::ModelWeights> device_twin(const std::shared_ptr<lily::ModelWeights>& src,
                                                       int* changed = nullptr, bool naive = false,
                                                       bool keep_dense = false) {
  auto w = std::make_shared<lily::ModelWeights>(*src);
  w->keep_alive.push_back(src);  // the codes stay where the source keeps them
  int n = 0;
  for_each_matrix(*w, [&](lily::QMatrix& m) {
    const bool dense_wide = m.kind == lily::QMatrix::Kind::Dense && m.dtype != lily::DType::BF16 && !keep_dense;
    const bool ggml_wide = m.kind == lily::QMatrix::Kind::Ggml && m.gtype != uint32_t(lily::GgmlType::Q6_K);
    if (ggml_wide || dense_wide) {  // the device's bf16 rows
      auto h = std::make_shared<std::vector<uint16_t>>(size_t(m.rows) * size_t(m.cols));
      std::vector<float> row(size_t(m.cols));
      for (int64_t r = 0; r < m.rows; ++r) {
        lily::dequant_row(m, r, row.data());
        for (int64_t i = 0; i < m.cols; ++i) (*h)[size_t(r * m.cols + i)] = lily::f32_to_bf16(row[size_t(i)]);
      }
      lily::QMatrix d;
      d.kind = lily::QMatrix::Kind::Dense;
      d.dtype = lily::DType::BF16;
      d.rows = m.rows;
      d.cols = m.cols;
      d.w = h->data();
      m = d;
      w->keep_alive.push_back(h);
      ++n;
      return;
    }
    if (m.kind != lily::QMatrix::Kind::Affine || m.sdtype == lily::DType::BF16) return;
    if (!naive && m.bits == 8 && lily::affine_i8z(m.w, m.scales, m.biases, m.sdtype, m.rows, m.cols, m.group))
      return;  // kI8: int8 codes q - z with the exact f32 scale
    const size_t ng = size_t(m.rows) * size_t(m.cols / m.group);
    auto buf = std::make_shared<std::vector<float>>(2 * ng);
    if (!naive && m.bits == 4 && lily::affine_q4z(m.scales, m.biases, m.sdtype, ng)) {  // kQ4Z (scale to 2^-20)
      for (size_t i = 0; i < ng; ++i) {
        uint32_t word = 0;
        lily::q4z_word(lily::decode_scalar(m.scales, m.sdtype, i), lily::decode_scalar(m.biases, m.sdtype, i), &word);
        lily::q4z_decode(word, &(*buf)[i], &(*buf)[ng + i]);
      }
      m.scales = buf->data();
      m.biases = buf->data() + ng;
      m.sdtype = lily::DType::F32;
      w->keep_alive.push_back(buf);
      ++n;
      return;
    }
    if (!naive && lily::affine_f16_pairs(m.scales, m.biases, m.sdtype, ng)) {  // kQ4H / kQ8H: fp16 pairs
      for (size_t i = 0; i < ng; ++i) {
        const uint32_t word = lily::f16_pair_word(lily::decode_scalar(m.scales, m.sdtype, i),
                                                  lily::decode_scalar(m.biases, m.sdtype, i));
        (*buf)[i] = lily::f16_to_f32(uint16_t(word & 0xffffu));
        (*buf)[ng + i] = lily::f16_to_f32(uint16_t(word >> 16));
      }
    } else {
      for (size_t i = 0; i < ng; ++i) {
        lily::Bf16Pair p = lily::affine_pair_at(m.scales, m.biases, m.sdtype, i);
        if (naive) {
          p.scale = lily::f32_to_bf16(lily::decode_scalar(m.scales, m.sdtype, i));
          p.bias = lily::f32_to_bf16(lily::decode_scalar(m.biases, m.sdtype, i));
        }
        (*buf)[i] = lily::bf16_to_f32(p.scale);
        (*buf)[ng + i] = lily::bf16_to_f32(p.bias);
      }
    }
    m.scales = buf->data();
    m.biases = buf->data() + ng;
    m.sdtype = lily::DType::F32;
    w->keep_alive.push_back(buf);
    ++n;
  });
  if (changed) *changed = n;
  return w;
}

}  // namespace lily_test
