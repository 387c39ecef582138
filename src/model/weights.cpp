// QMatrix sizes and the reference row decoder (every format a matrix can have after loading).
#include "model/weights.h"

#include <algorithm>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"

namespace lily {

size_t QMatrix::row_bytes() const {
  if (kind == Kind::Dense || kind == Kind::Fp8Block) return size_t(cols) * dtype_size(dtype);
  if (kind == Kind::Ggml) {
    GgmlTypeInfo ti;
    if (!ggml_type_info(gtype, &ti) || ti.block <= 0) return 0;
    return size_t(cols / ti.block) * size_t(ti.bytes);
  }
  return size_t(cols) * size_t(bits) / 8;
}

size_t QMatrix::bytes() const {
  size_t b = size_t(rows) * row_bytes();
  if (kind == Kind::Affine && group > 0) b += 2 * size_t(rows) * scale_bytes(sdtype, size_t(cols / group));
  if (kind == Kind::Fp8Block && group > 0)
    b += size_t((rows + group - 1) / group) * size_t((cols + group - 1) / group) * dtype_size(sdtype);
  return b;
}

std::string QMatrix::format_name() const {
  switch (kind) {
    case Kind::Dense: return dtype_name(dtype);
    case Kind::Affine: return "affine " + std::to_string(bits) + "-bit group " + std::to_string(group);
    case Kind::Fp8Block: return "FP8 e4m3 " + std::to_string(group) + "x" + std::to_string(group) + " blocks";
    case Kind::Ggml: return "GGUF " + ggml_type_name(gtype) + " blocks";
  }
  return "?";
}

void dequant_row(const QMatrix& m, int64_t row, float* out) {
  if (!m.valid() || row < 0 || row >= m.rows)
    throw Error("dequant_row: row " + std::to_string(row) + " out of range for a matrix of " + std::to_string(m.rows) +
                " rows");
  const auto* w = static_cast<const uint8_t*>(m.w) + size_t(row) * m.row_bytes();
  if (m.kind == QMatrix::Kind::Dense) {
    if (m.dtype != DType::F32 && m.dtype != DType::BF16 && m.dtype != DType::F16)
      throw Error(std::string("dequant_row: expected a dense BF16, F16 or F32 matrix, found ") + dtype_name(m.dtype));
    for (int64_t j = 0; j < m.cols; ++j) out[j] = decode_scalar(w, m.dtype, size_t(j));
    return;
  }
  if (m.kind == QMatrix::Kind::Fp8Block) {
    if (m.dtype != DType::F8_E4M3 || m.group <= 0)
      throw Error("dequant_row: expected an F8_E4M3 block-scaled matrix, found " + m.format_name());
    const int64_t nbc = (m.cols + m.group - 1) / m.group;
    const size_t s0 = size_t(row / m.group) * size_t(nbc);
    for (int64_t bc = 0; bc < nbc; ++bc) {
      const float s = decode_scalar(m.scales, m.sdtype, s0 + size_t(bc));
      const int64_t end = std::min<int64_t>(m.cols, (bc + 1) * m.group);
      for (int64_t j = bc * m.group; j < end; ++j) out[j] = f8e4m3_to_f32(w[j]) * s;
    }
    return;
  }
  if (m.kind == QMatrix::Kind::Ggml) {
    GgmlTypeInfo ti;
    if (!ggml_type_info(m.gtype, &ti) || !gguf_can_decode(m.gtype) || ti.block <= 0 || m.cols % ti.block != 0)
      throw Error("dequant_row: unsupported matrix " + m.format_name());
    gguf_dequant_row(m.gtype, w, m.cols, out);
    return;
  }
  if (m.bits < 2 || m.bits > 8 || m.bits == 7 || m.group <= 0 || m.cols % m.group != 0 || (m.cols * m.bits) % 8 != 0)
    throw Error("dequant_row: unsupported affine matrix (bits " + std::to_string(m.bits) + ", group " +
                std::to_string(m.group) + ", cols " + std::to_string(m.cols) + ")");
  const size_t ng = size_t(m.cols / m.group);
  for (size_t gi = 0; gi < ng; ++gi) {
    const float scale = decode_scalar(m.scales, m.sdtype, size_t(row) * ng + gi);
    const float bias = decode_scalar(m.biases, m.sdtype, size_t(row) * ng + gi);
    for (int64_t j = int64_t(gi) * m.group; j < int64_t(gi + 1) * m.group; ++j)
      out[j] = scale * float(affine_code(w, m.bits, j)) + bias;
  }
}

}  // namespace lily
