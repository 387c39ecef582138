#include "cuda/weight_upload.h"

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "model/affine_pair.h"

namespace lily::cuda {

DMat describe_matrix(const QMatrix& q, const char* what) {
  if (!q.valid()) throw Error(std::string("cuda: missing weight ") + what);
  DMat m;
  m.rows = int(q.rows);
  m.cols = int(q.cols);
  if (q.cols % 32) throw Error(std::string("cuda: ") + what + ": cols not a multiple of 32");
  if (q.kind == QMatrix::Kind::Affine) {
    if (q.bits != 4 && q.bits != 8) throw Error(std::string("cuda: ") + what + ": only 4/8-bit affine");
    if (q.group <= 0 || q.group % 32 || q.cols % q.group)
      throw Error(std::string("cuda: ") + what + ": " + q.format_name() + ": group size not a multiple of 32 "
                  "dividing the " + std::to_string(q.cols) + " columns");
    if (q.sdtype != DType::BF16 && q.sdtype != DType::F16 && q.sdtype != DType::F32 && q.sdtype != DType::KS8)
      throw Error(std::string("cuda: ") + what + ": scales of type " + dtype_name(q.sdtype));
    m.fmt = q.bits == 4 ? kQ4 : kQ8;
    m.group = q.group;
    m.row_bytes = q.cols * q.bits / 8;
    m.sb_row = int(q.cols / q.group);
  } else if (q.kind == QMatrix::Kind::Dense || q.kind == QMatrix::Kind::Fp8Block || q.kind == QMatrix::Kind::Ggml) {
    m.fmt = kBF16;  // FP8 and GGUF (Q6_K) blocks: dequantised and rounded to bf16 on upload (no kernels of their own)
    m.row_bytes = q.cols * 2;
  } else {
    throw Error(std::string("cuda: ") + what + ": " + q.format_name() +
                " weights are not supported by the CUDA backend (use --backend cpu, or `lily quantize` to an MLX "
                "4-bit checkpoint)");
  }
  return m;
}

size_t dmat_w_bytes(const DMat& m) { return size_t(m.row_bytes) * size_t(m.rows); }
size_t dmat_sb_words(const DMat& m) { return size_t(m.sb_row) * size_t(m.rows); }

void copy_matrix(const QMatrix& q, const DMat& m, uint8_t* dw, uint32_t* dsb) {
  if (m.fmt != kBF16) {
    LILY_CUDA_CHECK(cudaMemcpy(dw, q.w, dmat_w_bytes(m), cudaMemcpyHostToDevice));
    const size_t nsb = dmat_sb_words(m);
    std::vector<uint32_t> sb(nsb);
    for (size_t i = 0; i < nsb; ++i) sb[i] = affine_pair_at(q.scales, q.biases, q.sdtype, i).word();
    LILY_CUDA_CHECK(cudaMemcpy(dsb, sb.data(), nsb * 4, cudaMemcpyHostToDevice));
  } else if (q.kind == QMatrix::Kind::Dense && q.dtype == DType::BF16) {
    LILY_CUDA_CHECK(cudaMemcpy(dw, q.w, dmat_w_bytes(m), cudaMemcpyHostToDevice));
  } else if (q.kind == QMatrix::Kind::Fp8Block || q.kind == QMatrix::Kind::Ggml) {
    const size_t C = size_t(q.cols);
    std::vector<float> row(C);
    std::vector<uint16_t> h(C);
    for (int64_t r = 0; r < q.rows; ++r) {  // row by row: the f32 form of a whole matrix is never held
      dequant_row(q, r, row.data());
      for (size_t i = 0; i < C; ++i) h[i] = f32_to_bf16(row[i]);
      LILY_CUDA_CHECK(cudaMemcpy(dw + size_t(r) * C * 2, h.data(), C * 2, cudaMemcpyHostToDevice));
    }
  } else {
    const size_t n = size_t(q.rows) * size_t(q.cols);
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = f32_to_bf16(decode_scalar(q.w, q.dtype, i));
    LILY_CUDA_CHECK(cudaMemcpy(dw, h.data(), n * 2, cudaMemcpyHostToDevice));
  }
}

}  // namespace lily::cuda
