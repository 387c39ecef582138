// ggml block decoders against hand-built blocks whose values are worked out here, independently of the
// decoder's indexing (the loops follow the formats' published block order); the affine repack against the
// decoder (bit-exact); the quantisers within their step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "core/dtype.h"
#include "core/error.h"
#include "io/gguf_quants.h"
#include "model/weights.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/weight_upload.h"
#endif

using namespace lily;

namespace {

void put16(std::vector<uint8_t>& b, size_t at, uint16_t v) { std::memcpy(b.data() + at, &v, 2); }

constexpr uint16_t kHalf = 0x3800, kOne = 0x3C00, kQuarter = 0x3400, kTwo = 0x4000;

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& b, int n) {
  std::vector<float> y(size_t(n), -999.0f);
  gguf_dequant_row(uint32_t(t), b.data(), n, y.data());
  return y;
}

}  // namespace

TEST(GgufQuants, Q4_0) {
  std::vector<uint8_t> b(18);
  put16(b, 0, kHalf);
  for (int j = 0; j < 16; ++j) b[size_t(2 + j)] = uint8_t(j | ((15 - j) << 4));
  const auto y = decode(GgmlType::Q4_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], 0.5f * float(j - 8));
    EXPECT_EQ(y[size_t(16 + j)], 0.5f * float(7 - j));
  }
}

TEST(GgufQuants, Q4_1AndQ5_1) {
  std::vector<uint8_t> b(20);
  put16(b, 0, kQuarter);
  put16(b, 2, 0xBC00);  // m = -1
  for (int j = 0; j < 16; ++j) b[size_t(4 + j)] = uint8_t((j * 5) & 15) | uint8_t(j << 4);
  auto y = decode(GgmlType::Q4_1, b, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[size_t(j)], 0.25f * float((j * 5) & 15) - 1.0f);
    EXPECT_EQ(y[size_t(16 + j)], 0.25f * float(j) - 1.0f);
  }
  std::vector<uint8_t> c(24);
  put16(c, 0, kTwo);
  put16(c, 2, kOne);
  const uint8_t qh[4] = {0x01, 0x80, 0x00, 0xFF};  // bits 0, 15, 24..31 set
  std::memcpy(c.data() + 4, qh, 4);
  for (int j = 0; j < 16; ++j) c[size_t(8 + j)] = uint8_t(15 - j) | uint8_t(3 << 4);
  y = decode(GgmlType::Q5_1, c, 32);
  for (int j = 0; j < 32; ++j) {
    const int hi = (j == 0 || j == 15 || j >= 24) ? 16 : 0;
    const int lo = j < 16 ? 15 - j : 3;
    EXPECT_EQ(y[size_t(j)], 2.0f * float(lo + hi) + 1.0f) << j;
  }
}

TEST(GgufQuants, Q5_0) {
  std::vector<uint8_t> b(22);
  put16(b, 0, kHalf);
  const uint32_t qh = 0x3CF00FA5u;
  std::memcpy(b.data() + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) b[size_t(6 + j)] = uint8_t((j * 17) & 255);
  const auto y = decode(GgmlType::Q5_0, b, 32);
  for (int j = 0; j < 16; ++j) {
    const int x0 = ((j * 17) & 15) | (((qh >> j) & 1) << 4);
    const int x1 = (((j * 17) & 255) >> 4) | (((qh >> (j + 16)) & 1) << 4);
    EXPECT_EQ(y[size_t(j)], 0.5f * float(x0 - 16));
    EXPECT_EQ(y[size_t(j + 16)], 0.5f * float(x1 - 16));
  }
}

TEST(GgufQuants, Q8_0AndQ8_K) {
  std::vector<uint8_t> b(34);
  put16(b, 0, kQuarter);
  for (int j = 0; j < 32; ++j) b[size_t(2 + j)] = uint8_t(int8_t(j * 8 - 128));
  auto y = decode(GgmlType::Q8_0, b, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[size_t(j)], 0.25f * float(j * 8 - 128));
  std::vector<uint8_t> k(292);
  const float d = 0.125f;
  std::memcpy(k.data(), &d, 4);
  for (int j = 0; j < 256; ++j) k[size_t(4 + j)] = uint8_t(j);  // as int8: 0..127, -128..-1
  y = decode(GgmlType::Q8_K, k, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(y[size_t(j)], 0.125f * float(j < 128 ? j : j - 256));
}

TEST(GgufQuants, Q4_KScalesAndValues) {
  const int sc[8] = {1, 2, 3, 4, 17, 33, 50, 63}, mn[8] = {0, 5, 10, 15, 20, 40, 60, 63};
  // The 12 scale bytes worked out by hand from the packing rule (low 6 bits of bytes 0..7 hold the first four
  // scales / mins; sub-blocks 4..7 keep their low nibbles in bytes 8..11 and their top two bits in the top
  // bits of bytes 0..7).
  const uint8_t packed[12] = {65, 130, 195, 196, 64, 133, 202, 207, 65, 129, 194, 255};
  for (int j = 0; j < 8; ++j) {
    uint8_t a, m;
    k_scale_min(j, packed, &a, &m);
    EXPECT_EQ(a, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
  std::vector<uint8_t> b(144);
  put16(b, 0, kOne);
  put16(b, 2, kHalf);
  std::memcpy(b.data() + 4, packed, 12);
  for (int i = 0; i < 128; ++i) b[size_t(16 + i)] = uint8_t(i * 3 + 1);
  const auto y = decode(GgmlType::Q4_K, b, 256);
  // Blocks of 64: the low nibbles of 32 bytes (sub-block 2c), then their high nibbles (sub-block 2c+1).
  int e = 0;
  for (int c = 0; c < 4; ++c)
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 32; ++l, ++e) {
        const uint8_t byte = uint8_t((32 * c + l) * 3 + 1);
        const int q = half ? byte >> 4 : byte & 15;
        const int s = 2 * c + half;
        EXPECT_EQ(y[size_t(e)], 1.0f * float(sc[s]) * float(q) - 0.5f * float(mn[s])) << e;
      }
}

TEST(GgufQuants, Q5_K) {
  const uint8_t packed[12] = {65, 130, 195, 196, 64, 133, 202, 207, 65, 129, 194, 255};
  const int sc[8] = {1, 2, 3, 4, 17, 33, 50, 63}, mn[8] = {0, 5, 10, 15, 20, 40, 60, 63};
  std::vector<uint8_t> b(176);
  put16(b, 0, kQuarter);
  put16(b, 2, kOne);
  std::memcpy(b.data() + 4, packed, 12);
  for (int i = 0; i < 32; ++i) b[size_t(16 + i)] = uint8_t(i * 37 + 11);
  for (int i = 0; i < 128; ++i) b[size_t(48 + i)] = uint8_t(i * 5 + 2);
  const auto y = decode(GgmlType::Q5_K, b, 256);
  int e = 0;
  for (int c = 0; c < 4; ++c)
    for (int half = 0; half < 2; ++half)
      for (int l = 0; l < 32; ++l, ++e) {
        const uint8_t byte = uint8_t((32 * c + l) * 5 + 2), hb = uint8_t(l * 37 + 11);
        const int s = 2 * c + half;
        const int q = (half ? byte >> 4 : byte & 15) + (((hb >> s) & 1) ? 16 : 0);
        EXPECT_EQ(y[size_t(e)], 0.25f * float(sc[s]) * float(q) - 1.0f * float(mn[s])) << e;
      }
}

TEST(GgufQuants, Q6_K) {
  std::vector<uint8_t> b(210);
  for (int i = 0; i < 128; ++i) b[size_t(i)] = uint8_t(i * 7 + 3);
  for (int i = 0; i < 64; ++i) b[size_t(128 + i)] = uint8_t(i * 13 + 5);
  for (int i = 0; i < 16; ++i) b[size_t(192 + i)] = uint8_t(int8_t(i * 9 - 70));
  put16(b, 208, kQuarter);
  const auto y = decode(GgmlType::Q6_K, b, 256);
  // Two halves of 128; in each, for l < 32: four values at l, l+32, l+64, l+96 from ql[l], ql[l+32] (low then
  // high nibbles) and the four 2-bit fields of qh[l]; scale index (l/16) + 0, 2, 4, 6 within the half's eight.
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const int ql0 = uint8_t((64 * h + l) * 7 + 3), ql1 = uint8_t((64 * h + l + 32) * 7 + 3);
      const int qh = uint8_t((32 * h + l) * 13 + 5);
      const int q[4] = {(ql0 & 15) | ((qh & 3) << 4), (ql1 & 15) | (((qh >> 2) & 3) << 4),
                        (ql0 >> 4) | (((qh >> 4) & 3) << 4), (ql1 >> 4) | (((qh >> 6) & 3) << 4)};
      for (int t = 0; t < 4; ++t) {
        const int is = 8 * h + l / 16 + 2 * t;
        const float scale = float(is * 9 - 70);
        EXPECT_EQ(y[size_t(128 * h + 32 * t + l)], 0.25f * scale * float(q[t] - 32)) << h << " " << l << " " << t;
      }
    }
}

// The codes and scales of Q6_K the CUDA backend keeps (codes q - 32, scales d * sc per 16; kQ6 chunks): scale * code
// equals the decoder's value bit for bit on random blocks (every code and scale, f16 scales of several magnitudes).
TEST(GgufQuants, Q6_KDeviceCodesAreExact) {
  std::mt19937 rng(11);
  const int n = 256 * 6;
  std::vector<uint8_t> b(210 * 6);
  for (int k = 0; k < 6; ++k) {
    for (int i = 0; i < 208; ++i) b[size_t(210 * k + i)] = uint8_t(rng());
    put16(b, size_t(210 * k + 208), f32_to_f16(std::ldexp(1.3f + 0.1f * float(k), -3 * k - 2)));
  }
  const auto y = decode(GgmlType::Q6_K, b, n);
  std::vector<int8_t> codes(n);
  std::vector<float> sc(n / 16);
  gguf_q6k_codes_row(b.data(), n, codes.data(), sc.data());
  for (int e = 0; e < n; ++e) {
    ASSERT_GE(codes[size_t(e)], -32);
    ASSERT_LE(codes[size_t(e)], 31);
    ASSERT_EQ(sc[size_t(e / 16)] * float(codes[size_t(e)]), y[size_t(e)]) << e;
  }
  EXPECT_THROW(gguf_q6k_codes_row(b.data(), 100, codes.data(), sc.data()), Error);
#ifdef LILY_HAVE_CUDA
  // the kQ6 chunks made from them (6-bit codes with the f32 scale inside, kernels.h) read back bit for bit
  for (int j = 0; j < n / 16; ++j) {
    uint8_t chunk[16];
    cuda::q6_chunk(codes.data() + 16 * j, sc[size_t(j)], chunk);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(cuda::q6_chunk_value(chunk, i), y[size_t(16 * j + i)]) << j << " " << i;
  }
#endif
}

TEST(GgufQuants, FloatTypes) {
  std::vector<uint8_t> b(8);
  put16(b, 0, kHalf);
  put16(b, 2, 0xC000);  // -2
  put16(b, 4, f32_to_bf16(3.5f));
  put16(b, 6, f32_to_bf16(-0.125f));
  auto y = decode(GgmlType::F16, std::vector<uint8_t>(b.begin(), b.begin() + 4), 2);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], -2.0f);
  y = decode(GgmlType::BF16, std::vector<uint8_t>(b.begin() + 4, b.end()), 2);
  EXPECT_EQ(y[0], 3.5f);
  EXPECT_EQ(y[1], -0.125f);
  for (float f : {0.0f, 1.0f, -1.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f})
    EXPECT_EQ(f16_to_f32(gguf_f32_to_f16(f)), f == 0.1f ? 0.0999755859375f : f) << f;
  EXPECT_EQ(gguf_f32_to_f16(1e6f), 0x7C00);
}

TEST(GgufQuants, RejectsUndecodableType) {
  std::vector<uint8_t> b(84);
  float y[256];
  EXPECT_THROW(gguf_dequant_row(uint32_t(GgmlType::Q2_K), b.data(), 256, y), Error);
  EXPECT_THROW(gguf_dequant_row(uint32_t(GgmlType::Q8_0), b.data(), 31, y), Error);
}

// Random blocks (with finite scales) repacked to affine decode bit-identically through dequant_row.
TEST(GgufQuants, AffineRepackIsExact) {
  std::mt19937 rng(5);
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_0, GgmlType::Q5_1,
                     GgmlType::Q5_K, GgmlType::Q8_K}) {
    GgmlTypeInfo ti;
    ASSERT_TRUE(ggml_type_info(uint32_t(t), &ti));
    const int64_t n = 512;
    std::vector<uint8_t> b(size_t(n / ti.block * ti.bytes));
    for (auto& x : b) x = uint8_t(rng());
    for (int64_t k = 0; k < n / ti.block; ++k) {  // scales: random halves in [2^-8, 2)
      uint8_t* p = b.data() + k * ti.bytes;
      const uint16_t d = uint16_t(0x1C00 + rng() % 0x2000);
      if (t == GgmlType::Q8_K) {
        const float df = f16_to_f32(d);
        std::memcpy(p, &df, 4);
        continue;
      }
      std::memcpy(p, &d, 2);
      if (t == GgmlType::Q4_1 || t == GgmlType::Q4_K || t == GgmlType::Q5_1 || t == GgmlType::Q5_K) {
        const bool signed_min = t == GgmlType::Q4_1 || t == GgmlType::Q5_1;
        const uint16_t m = uint16_t((rng() & 0x8000u) * signed_min | (0x1C00 + rng() % 0x2000));
        std::memcpy(p + 2, &m, 2);
      }
    }
    const int bits = gguf_repack_bits(uint32_t(t));
    std::vector<uint32_t> w(size_t(n * bits / 32));
    std::vector<float> s(size_t(n / 32)), bi(size_t(n / 32));
    gguf_repack_row(uint32_t(t), b.data(), n, w.data(), s.data(), bi.data());
    QMatrix m;
    m.kind = QMatrix::Kind::Affine;
    m.sdtype = DType::F32;
    m.bits = bits;
    m.group = 32;
    m.rows = 1;
    m.cols = n;
    m.w = w.data();
    m.scales = s.data();
    m.biases = bi.data();
    std::vector<float> ref(static_cast<size_t>(n)), got(static_cast<size_t>(n));
    gguf_dequant_row(uint32_t(t), b.data(), n, ref.data());
    dequant_row(m, 0, got.data());
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(got[size_t(j)], ref[size_t(j)]) << ti.name << " element " << j;
  }
}

// Quantise -> decode stays within each format's step (bounds derived from the block's range).
TEST(GgufQuants, QuantisersRoundTrip) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(1024);
  for (auto& v : x) v = nd(rng);
  struct Case { GgmlType t; float max_rel; };  // max |err| / max |x| over the row
  for (Case c : {Case{GgmlType::Q8_0, 0.5f / 127 * 1.01f}, Case{GgmlType::Q4_0, 0.5f / 7 * 1.01f},
                 Case{GgmlType::Q5_0, 0.5f / 15 * 1.01f}, Case{GgmlType::Q4_1, 0.5f * 2 / 15 * 1.01f},
                 Case{GgmlType::Q5_1, 0.5f * 2 / 31 * 1.01f}, Case{GgmlType::Q4_K, 2.0f / 15 * 0.75f},
                 Case{GgmlType::Q5_K, 2.0f / 31 * 0.75f}, Case{GgmlType::Q6_K, 1.0f / 31 * 0.75f},
                 Case{GgmlType::Q8_K, 0.5f / 127 * 1.01f}}) {
    const auto q = gguf_quantize(c.t, x.data(), int64_t(x.size()));
    std::vector<float> y(x.size());
    gguf_dequant_row(uint32_t(c.t), q.data(), int64_t(x.size()), y.data());
    float amax = 0, emax = 0;
    for (size_t i = 0; i < x.size(); ++i) amax = std::max(amax, std::fabs(x[i])), emax = std::max(emax, std::fabs(y[i] - x[i]));
    EXPECT_LE(emax / amax, c.max_rel) << ggml_type_name(uint32_t(c.t));
    EXPECT_GT(emax, 0.0f) << ggml_type_name(uint32_t(c.t));  // the format really quantised
  }
}
