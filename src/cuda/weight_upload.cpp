#include "cuda/weight_upload.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "model/affine_pair.h"

namespace lily::cuda {

bool q4z_matrix(const QMatrix& q) {
  if (q.kind != QMatrix::Kind::Affine || q.bits != 4 || q.group <= 0) return false;
  return affine_q4z(q.scales, q.biases, q.sdtype, size_t(q.rows) * size_t(q.cols / q.group));
}

bool h16_matrix(const QMatrix& q) {
  if (q.kind != QMatrix::Kind::Affine || q.group <= 0) return false;
  return affine_f16_pairs(q.scales, q.biases, q.sdtype, size_t(q.rows) * size_t(q.cols / q.group));
}

bool i8z_matrix(const QMatrix& q) {
  if (q.kind != QMatrix::Kind::Affine || q.bits != 8) return false;
  return affine_i8z(q.w, q.scales, q.biases, q.sdtype, q.rows, q.cols, q.group);
}

bool exact_form(const QMatrix& q, bool widen8) { return q.bits == 4 && !widen8 ? q4z_matrix(q) : i8z_matrix(q); }
bool half_form(const QMatrix& q, bool) { return h16_matrix(q); }

DMat describe_matrix(const QMatrix& q, const char* what, bool widen8, int refine) {
  const bool exact = refine & kRefineExact;
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
    if (q.bits == 4 && !widen8)
      m.fmt = exact && q4z_matrix(q) ? kQ4Z : (refine & kRefineHalf) && h16_matrix(q) ? kQ4H : kQ4;
    else  // kI8: int8 codes q - z with the f32 scale, exact; kQ8H: fp16 pairs
      m.fmt = exact && i8z_matrix(q) ? kI8 : (refine & kRefineHalf) && h16_matrix(q) ? kQ8H : kQ8;
    dmat_set_group(m, q.group);
    m.row_bytes = q.cols * (fmt_q4(m.fmt) ? 4 : 8) / 8;
    m.sb_row = int(q.cols / q.group);
  } else if (q.kind == QMatrix::Kind::Fp8Block) {
    if (q.dtype != DType::F8_E4M3 || q.group <= 0 || q.group % 16 || !q.scales)
      throw Error(std::string("cuda: ") + what + ": " + q.format_name() + ": expected e4m3 codes with block scales "
                  "of a multiple of 16 columns");
    m.fmt = kF8;  // the codes as stored, the block's scale repeated per row (f32)
    dmat_set_group(m, q.group);
    m.row_bytes = q.cols;
    m.sb_row = int((q.cols + q.group - 1) / q.group);
  } else if (q.kind == QMatrix::Kind::Ggml && q.gtype == uint32_t(GgmlType::Q6_K)) {
    if (q.cols % 256) throw Error(std::string("cuda: ") + what + ": Q6_K rows must be whole 256-element blocks");
    m.fmt = kQ6;  // 6-bit codes and the f32 scale d * sc of each 16 columns in one 16-byte chunk (exact)
    dmat_set_group(m, 16);
    m.row_bytes = q.cols;
  } else if (q.kind == QMatrix::Kind::Dense || q.kind == QMatrix::Kind::Ggml) {
    m.fmt = kBF16;  // other GGUF blocks (none after loading: the loader repacks them) rounded to bf16 on upload
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

namespace {

// kF8 / kI8: the codes and the f32 scales of rows [r0, r0 + n) into the host buffers.
void code8_rows(const QMatrix& q, const DMat& m, int64_t r0, int64_t n, uint8_t* codes, uint32_t* sb) {
  const size_t C = size_t(q.cols);
  if (m.fmt == kF8) {
    std::memcpy(codes, static_cast<const uint8_t*>(q.w) + size_t(r0) * C, size_t(n) * C);
    for (int64_t r = 0; r < n; ++r) {
      const size_t s0 = size_t((r0 + r) / q.group) * size_t(m.sb_row);  // the block row's scales
      for (int b = 0; b < m.sb_row; ++b) {
        const float s = decode_scalar(q.scales, q.sdtype, s0 + size_t(b));
        std::memcpy(sb + size_t(r) * size_t(m.sb_row) + size_t(b), &s, 4);
      }
    }
    return;
  }
  if (q.kind == QMatrix::Kind::Affine) {  // kI8 from affine 8-bit codes with zero points (i8z_matrix)
    const auto* w = static_cast<const uint32_t*>(q.w);
    for (int64_t r = 0; r < n; ++r)
      for (int g = 0; g < m.sb_row; ++g) {
        const size_t gi = size_t(r0 + r) * size_t(m.sb_row) + size_t(g);
        const float s = decode_scalar(q.scales, q.sdtype, gi);
        uint32_t z = 0;
        i8z_zero(s, decode_scalar(q.biases, q.sdtype, gi), &z);
        std::memcpy(sb + size_t(r) * size_t(m.sb_row) + size_t(g), &s, 4);
        for (int64_t c = int64_t(g) * q.group; c < int64_t(g + 1) * q.group; ++c) {
          const int64_t e = (r0 + r) * q.cols + c;
          codes[size_t(r) * C + size_t(c)] = uint8_t(int8_t(int((w[e / 4] >> (8 * (e % 4))) & 255u) - int(z)));
        }
      }
    return;
  }
  throw Error("cuda: no 8-bit-code form for this matrix");
}

// kQ6: rows [r0, r0 + n) of a Q6_K matrix as 16-byte chunks (kernels.h), the rows split over the host's threads
// (about 2.5 ns a weight on one: 15 s for a Q4_K_M file's 5.9e9 Q6_K weights).
void q6_rows(const QMatrix& q, int64_t r0, int64_t n, uint8_t* chunks) {
  const size_t C = size_t(q.cols);
  parallel_for(n, 16, [&](int64_t b, int64_t e) {
    std::vector<int8_t> codes(C);
    std::vector<float> sc(C / 16);
    for (int64_t r = b; r < e; ++r) {
      gguf_q6k_codes_row(static_cast<const uint8_t*>(q.w) + size_t(r0 + r) * q.row_bytes(), q.cols, codes.data(),
                         sc.data());
      for (size_t j = 0; j < C / 16; ++j) q6_chunk(codes.data() + 16 * j, sc[j], chunks + size_t(r) * C + 16 * j);
    }
  });
}

}  // namespace

// Column i's code word G and byte b in a kQ6 chunk (kernels.h): the low nibble at bits 4 (i % 8) of word i / 8,
// the high bits at bits 8b + 2G of word 2.
static void q6_place(int i, int& G, int& b) {
  G = (i / 8) * 2 + i % 2;
  b = (i % 8) / 2;
}

void q6_chunk(const int8_t* codes, float scale, uint8_t* chunk) {
  uint32_t w[4] = {0, 0, 0, 0};
  for (int i = 0; i < 16; ++i) {
    const uint32_t q = uint32_t(codes[i] + 32);  // 0..63
    int G, b;
    q6_place(i, G, b);
    w[i / 8] |= (q & 15u) << (4 * (i % 8));
    w[2] |= (q >> 4) << (8 * b + 2 * G);
  }
  std::memcpy(&w[3], &scale, 4);
  std::memcpy(chunk, w, 16);
}

float q6_chunk_value(const uint8_t* chunk, int i) {
  uint32_t w[4];
  std::memcpy(w, chunk, 16);
  int G, b;
  q6_place(i, G, b);
  const uint32_t q = ((w[i / 8] >> (4 * (i % 8))) & 15u) | ((w[2] >> (8 * b + 2 * G)) & 3u) << 4;
  float s;
  std::memcpy(&s, &w[3], 4);
  return s * float(int(q) - 32);
}

void copy_matrix(const QMatrix& q, const DMat& m, uint8_t* dw, uint32_t* dsb) {
  if (fmt_code8(m.fmt) || m.fmt == kQ6) {  // in pieces of about 16 MiB of codes: no host copy of a whole matrix
    const int64_t piece = std::max<int64_t>(1, (int64_t(16) << 20) / q.cols);
    std::vector<uint8_t> codes;
    std::vector<uint32_t> sb;
    for (int64_t r0 = 0; r0 < q.rows; r0 += piece) {
      const int64_t n = std::min<int64_t>(piece, q.rows - r0);
      codes.resize(size_t(n) * size_t(m.row_bytes));
      sb.resize(size_t(n) * size_t(m.sb_row));
      if (m.fmt == kQ6) q6_rows(q, r0, n, codes.data());
      else code8_rows(q, m, r0, n, codes.data(), sb.data());
      LILY_CUDA_CHECK(cudaMemcpy(dw + size_t(r0) * size_t(m.row_bytes), codes.data(), codes.size(),
                                 cudaMemcpyHostToDevice));
      if (!sb.empty())
        LILY_CUDA_CHECK(cudaMemcpy(dsb + size_t(r0) * size_t(m.sb_row), sb.data(), sb.size() * 4,
                                   cudaMemcpyHostToDevice));
    }
  } else if (fmt_sb(m.fmt)) {
    if (fmt_q8(m.fmt) && q.bits == 4) {  // widened: code k of a row from bits [4k, 4k + 4) to byte k
      const size_t n = size_t(q.rows) * size_t(q.cols);
      std::vector<uint8_t> codes(n);
      const auto* src = static_cast<const uint8_t*>(q.w);
      for (size_t i = 0; i < n; ++i) codes[i] = uint8_t((src[i / 2] >> (4 * (i % 2))) & 15u);
      LILY_CUDA_CHECK(cudaMemcpy(dw, codes.data(), n, cudaMemcpyHostToDevice));
    } else {
      LILY_CUDA_CHECK(cudaMemcpy(dw, q.w, dmat_w_bytes(m), cudaMemcpyHostToDevice));
    }
    const size_t nsb = dmat_sb_words(m);
    std::vector<uint32_t> sb(nsb);
    if (m.fmt == kQ4Z) {
      for (size_t i = 0; i < nsb; ++i)
        if (!q4z_word(decode_scalar(q.scales, q.sdtype, i), decode_scalar(q.biases, q.sdtype, i), &sb[i]))
          throw Error("cuda: a group of a kQ4Z matrix is not scale * (q - z) with z in 0..15");
    } else if (m.fmt == kQ4H || m.fmt == kQ8H) {
      for (size_t i = 0; i < nsb; ++i)
        sb[i] = f16_pair_word(decode_scalar(q.scales, q.sdtype, i), decode_scalar(q.biases, q.sdtype, i));
    } else {
      for (size_t i = 0; i < nsb; ++i) sb[i] = affine_pair_at(q.scales, q.biases, q.sdtype, i).word();
    }
    LILY_CUDA_CHECK(cudaMemcpy(dsb, sb.data(), nsb * 4, cudaMemcpyHostToDevice));
  } else if (q.kind == QMatrix::Kind::Dense && q.dtype == DType::BF16) {
    LILY_CUDA_CHECK(cudaMemcpy(dw, q.w, dmat_w_bytes(m), cudaMemcpyHostToDevice));
  } else if (q.kind == QMatrix::Kind::Ggml) {
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
