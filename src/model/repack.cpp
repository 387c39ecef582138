// Load-time repacking into the affine forms (see repack.h for each format's layout).
#include "model/repack.h"

#include <cstring>

#include "model/weights.h"

namespace lily {

void repack_bits_to_u8(const uint8_t* src, int bits, int64_t rows, int64_t cols, uint8_t* dst) {
  const size_t rb = size_t(cols) * size_t(bits) / 8;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = src + size_t(r) * rb;
    uint8_t* out = dst + size_t(r) * size_t(cols);
    for (int64_t j = 0; j < cols; ++j) out[j] = uint8_t(affine_code(row, bits, j));
  }
}

namespace {

uint32_t word_at(const uint8_t* p, size_t i) {  // little-endian 32-bit word i (any alignment)
  uint32_t w;
  std::memcpy(&w, p + 4 * i, 4);
  return w;
}

uint32_t nibble(uint32_t w, int k) { return (w >> (4 * k)) & 0xfu; }

constexpr int kAwqNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // output 8w + k is in nibble kAwqNibbleOf[k]

}  // namespace

void repack_int4(const Int4Source& s, uint8_t* codes, float* scales, float* biases) {
  const int64_t R = s.rows, C = s.cols, G = C / s.group, G64 = C / 64, per = s.group / 64;
  const size_t code_row = size_t(C / 2);
  std::memset(codes, 0, size_t(R) * code_row);
  auto put = [&](int64_t o, int64_t i, uint32_t q) { codes[size_t(o) * code_row + size_t(i / 2)] |= uint8_t(q << (4 * (i % 2))); };
  // codes
  for (int64_t o = 0; o < R; ++o)
    for (int64_t i = 0; i < C; ++i) {
      uint32_t q = 0;
      switch (s.format) {
        case Int4Source::Format::Gptq: q = nibble(word_at(s.qweight, size_t((i / 8) * R + o)), int(i % 8)); break;
        case Int4Source::Format::Awq:
          q = nibble(word_at(s.qweight, size_t(i * (R / 8) + o / 8)), kAwqNibbleOf[o % 8]);
          break;
        case Int4Source::Format::PackQuantized: q = nibble(word_at(s.qweight, size_t(o * (C / 8) + i / 8)), int(i % 8)); break;
      }
      put(o, i, q);
    }
  // scales and zero points -> scale, bias = -z * scale, per group of 64
  for (int64_t o = 0; o < R; ++o)
    for (int64_t g = 0; g < G; ++g) {
      float sc = 0.0f, z = 0.0f;
      switch (s.format) {
        case Int4Source::Format::Gptq:
          sc = decode_scalar(s.scales, s.sdtype, size_t(g * R + o));
          z = float(nibble(word_at(s.qzeros, size_t(g * (R / 8) + o / 8)), int(o % 8))) + (s.zeros_plus_one ? 1.0f : 0.0f);
          break;
        case Int4Source::Format::Awq:
          sc = decode_scalar(s.scales, s.sdtype, size_t(g * R + o));
          z = float(nibble(word_at(s.qzeros, size_t(g * (R / 8) + o / 8)), kAwqNibbleOf[o % 8]));
          break;
        case Int4Source::Format::PackQuantized:
          sc = decode_scalar(s.scales, s.sdtype, size_t(o * G + g));
          if (!s.qzeros) z = 8.0f;
          else if (s.zdtype == DType::I8) z = 8.0f + float(int8_t(s.qzeros[size_t(o * G + g)]));
          else z = float(nibble(word_at(s.qzeros, size_t((o / 8) * G + g)), int(o % 8)));
          break;
      }
      for (int64_t h = 0; h < per; ++h) {
        scales[size_t(o * G64 + g * per + h)] = sc;
        biases[size_t(o * G64 + g * per + h)] = -z * sc;
      }
    }
}

}  // namespace lily
