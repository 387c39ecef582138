// The GGUF K-quant paths of the fast CPU kernels: Q4_K / Q5_K repacked with their scales as stored (KS8) decode
// exactly and give the fast 4-bit kernels the same bits as f32 scales on every tier; Q6_K blocks run by the
// AVX2 f32 kernel and the AVX-512 integer kernel against the f32 reference; the in-memory Q4_K_M synthetic model
// loads as the file would.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cpu/fast/cpu_isa.h"
#include "cpu/fast/fast_matmul.h"
#include "cpu/fast/q6k_kernels.h"
#include "cpu/fast/quant_x.h"
#include "cpu/ref_ops.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "synth/synthetic_formats.h"
#include "test_metrics.h"

using namespace lily;

namespace {

std::vector<float> randn(size_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool has_isa(fast::Isa isa) { return static_cast<int>(fast::detected_isa()) >= static_cast<int>(isa); }

std::vector<fast::Isa> tiers() {
  std::vector<fast::Isa> t = {fast::Isa::Portable};
  if (has_isa(fast::Isa::Avx2)) t.push_back(fast::Isa::Avx2);
  if (has_isa(fast::Isa::Avx512)) t.push_back(fast::Isa::Avx512);
  return t;
}

// rows x cols of `type` quantised from random weights (std 0.02, with mean offsets so the mins matter).
std::vector<uint8_t> quantised(GgmlType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const size_t rb = gguf_row_bytes(type, cols);
  std::vector<uint8_t> out(size_t(rows) * rb);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> x = randn(size_t(cols), rng, 0.02f);
    for (int64_t c = 0; c < cols; ++c) x[size_t(c)] += 0.01f * float((c / 32) % 3 - 1);
    gguf_quantize_into(type, x.data(), cols, out.data() + size_t(r) * rb);
  }
  return out;
}

// A Q4_K / Q5_K matrix repacked both ways: KS8 scales and f32 scales (the same values).
struct Repacked {
  std::vector<uint32_t> w;
  std::vector<uint8_t> ks, kb;
  std::vector<float> fs, fb;
  QMatrix ks8, f32;
  Repacked(GgmlType type, const std::vector<uint8_t>& blocks, int64_t rows, int64_t cols) {
    const int bits = gguf_repack_bits(uint32_t(type));
    const size_t wpr = size_t(cols) * size_t(bits) / 32, gpr = size_t(cols / 32), srb = scale_bytes(DType::KS8, gpr);
    const size_t rb = gguf_row_bytes(type, cols);
    w.resize(size_t(rows) * wpr);
    ks.resize(size_t(rows) * srb);
    kb.resize(ks.size());
    fs.resize(size_t(rows) * gpr);
    fb.resize(fs.size());
    std::vector<uint32_t> w2(wpr);
    for (int64_t r = 0; r < rows; ++r) {
      const uint8_t* src = blocks.data() + size_t(r) * rb;
      gguf_repack_row_ks8(uint32_t(type), src, cols, &w[size_t(r) * wpr], &ks[size_t(r) * srb], &kb[size_t(r) * srb]);
      gguf_repack_row(uint32_t(type), src, cols, w2.data(), &fs[size_t(r) * gpr], &fb[size_t(r) * gpr]);
      EXPECT_EQ(0, std::memcmp(w2.data(), &w[size_t(r) * wpr], wpr * 4)) << "codes of row " << r;
    }
    f32.kind = QMatrix::Kind::Affine;
    f32.bits = bits;
    f32.group = 32;
    f32.rows = rows;
    f32.cols = cols;
    f32.w = w.data();
    f32.sdtype = DType::F32;
    f32.scales = fs.data();
    f32.biases = fb.data();
    ks8 = f32;
    ks8.sdtype = DType::KS8;
    ks8.scales = ks.data();
    ks8.biases = kb.data();
  }
};

}  // namespace

// KS8 holds d·sc and -dmin·m exactly: every scale and bias equals the f32 repack's bit for bit, and the rows
// decode to gguf_dequant_row's values; the bytes are 0.75 bits per weight instead of 2.
TEST(GgufFastPaths, Ks8RepackIsExact) {
  for (GgmlType type : {GgmlType::Q4_K, GgmlType::Q5_K}) {
    std::mt19937 rng{uint32_t(type)};
    const int64_t rows = 5, cols = 1024;
    const auto blocks = quantised(type, rows, cols, rng);
    Repacked p(type, blocks, rows, cols);
    for (size_t i = 0; i < p.fs.size(); ++i) {
      ASSERT_EQ(decode_scalar(p.ks.data(), DType::KS8, i), p.fs[i]) << "scale " << i;
      ASSERT_EQ(decode_scalar(p.kb.data(), DType::KS8, i), p.fb[i]) << "bias " << i;
    }
    std::vector<float> ref(static_cast<size_t>(cols)), got(ref.size());
    for (int64_t r = 0; r < rows; ++r) {
      gguf_dequant_row(uint32_t(type), blocks.data() + size_t(r) * gguf_row_bytes(type, cols), cols, ref.data());
      dequant_row(p.ks8, r, got.data());
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(got[size_t(c)], ref[size_t(c)]) << "row " << r << " col " << c;
    }
    const size_t codes = size_t(rows * cols) * size_t(p.f32.bits) / 8;
    EXPECT_EQ(p.ks8.bytes() - codes, size_t(rows * cols / 256 * 24));
    EXPECT_EQ(p.f32.bytes() - codes, size_t(rows * cols / 32 * 8));
  }
}

// The fast 4-bit kernels read KS8 scales as the same f32 values: the products are bit-identical to those with f32
// scales, on every tier, in decode (GEMV quads) and prefill (16-row tiles and the remainder rows).
TEST(GgufFastPaths, Ks8ScalesGiveTheF32ScalesBits) {
  std::mt19937 rng(5);
  for (int64_t cols : {256, 512, 2048}) {
    const int64_t rows = 37;
    Repacked p(GgmlType::Q4_K, quantised(GgmlType::Q4_K, rows, cols, rng), rows, cols);
    for (fast::Isa isa : tiers())
      for (int n : {1, 20}) {
        fast::set_isa_override(isa);
        const std::vector<float> X = randn(size_t(n) * size_t(cols), rng);
        std::vector<float> a(size_t(n) * size_t(rows), NAN), b(a.size(), NAN);
        fast::matmul(p.f32, X.data(), n, a.data(), true);
        fast::matmul(p.ks8, X.data(), n, b.data(), true);
        fast::clear_isa_override();
        for (size_t i = 0; i < a.size(); ++i)
          ASSERT_EQ(a[i], b[i]) << fast::isa_name(isa) << " cols " << cols << " n " << n << " at " << i;
      }
  }
}

// A Q6_K matrix over `blocks` (rows x cols, kept in its blocks as the GGUF loader keeps it).
QMatrix q6k_matrix(const std::vector<uint8_t>& blocks, int64_t rows, int64_t cols) {
  QMatrix m;
  m.kind = QMatrix::Kind::Ggml;
  m.gtype = uint32_t(GgmlType::Q6_K);
  m.dtype = DType::U8;
  m.rows = rows;
  m.cols = cols;
  m.w = blocks.data();
  return m;
}

// Q6_K blocks on the AVX2 kernel (avx512 and avx2 tiers) against the reference product of the decoded rows: the
// same f32 weights, only the order of the sums differs. Row counts that are not multiples of the kernel's 4 / 16,
// row ranges that start inside the matrix.
TEST(GgufFastPaths, Q6kKernelMatchesReference) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937 rng(9);
  for (int64_t cols : {256, 512, 2048})
    for (int64_t rows : {5, 37, 64}) {
      const auto blocks = quantised(GgmlType::Q6_K, rows, cols, rng);
      const QMatrix m = q6k_matrix(blocks, rows, cols);
      ASSERT_TRUE(fast::q6k_supported(m));
      for (int n : {1, 3, 21}) {
        const std::vector<float> X = randn(size_t(n) * size_t(cols), rng);
        std::vector<float> ref(size_t(n) * size_t(rows)), got(ref.size(), NAN), part(ref.size(), NAN);
        ref::matmul(m, X.data(), n, ref.data());
        fast::q6k_rows_avx2(m, 0, rows, X.data(), n, got.data());
        fast::q6k_rows_avx2(m, 3, rows, X.data(), n, part.data());
        const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n);
        EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-6) << what;
        for (int i = 0; i < n; ++i)
          for (int64_t r = 0; r < rows; ++r) {
            const size_t k = size_t(i) * size_t(rows) + size_t(r);
            ASSERT_LE(std::fabs(got[k] - ref[k]), 2e-5f * (1.0f + std::fabs(ref[k]))) << what << " row " << r;
            if (r >= 3) ASSERT_EQ(part[k], got[k]) << what << " row " << r;
            else ASSERT_TRUE(std::isnan(part[k])) << what << ": row " << r << " is outside the range";
          }
        for (fast::Isa isa : tiers()) {  // through matmul on each tier (portable: the generic row decoder)
          fast::set_isa_override(isa);
          std::vector<float> y(ref.size(), NAN);
          fast::matmul(m, X.data(), n, y.data(), true);
          fast::clear_isa_override();
          // avx512: the integer kernel on ~15-bit activations, the 4-bit kernels' precise bound
          EXPECT_LE(testmetrics::rms_rel_err(y, ref), isa == fast::Isa::Avx512 ? 2e-4 : 1e-6)
              << what << " " << fast::isa_name(isa);
        }
      }
    }
}

// The AVX-512 integer Q6_K kernel on the 4-bit kernels' quantised activations: against the reference within their
// bounds (precise 2e-4, 8-bit x 2e-2, as CpuFastG32.PortableMatchesReference), row ranges inside the matrix; and
// with outliers (a few |x| near 1e4 among values near 1, taken out of the codes): the small part kept, within 5e-3
// of its own size, which the crushed codes of a group with an outlier would miss.
TEST(GgufFastPaths, Q6kIntegerKernelMatchesReference) {
  if (!has_isa(fast::Isa::Avx512)) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(13);
  for (int64_t cols : {256, 512, 2048})
    for (int64_t rows : {5, 37, 64}) {
      const auto blocks = quantised(GgmlType::Q6_K, rows, cols, rng);
      const QMatrix m = q6k_matrix(blocks, rows, cols);
      ASSERT_TRUE(fast::q6k_int_supported(m));
      for (int n : {1, 3, 21})
        for (bool precise : {true, false}) {
          const std::vector<float> X = randn(size_t(n) * size_t(cols), rng);
          std::vector<float> ref(size_t(n) * size_t(rows)), got(ref.size(), NAN), part(ref.size(), NAN);
          ref::matmul(m, X.data(), n, ref.data());
          fast::QuantX qx;
          fast::quantize_x(X.data(), n, int(cols), precise, qx);
          fast::q6k_rows_avx512(m, 0, rows, qx, precise, got.data());
          fast::q6k_rows_avx512(m, 5, rows, qx, precise, part.data());
          const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n) +
                                   " precise=" + std::to_string(precise);
          EXPECT_LE(testmetrics::rms_rel_err(got, ref), precise ? 2e-4 : 2e-2) << what;
          for (size_t k = 0; k < got.size(); ++k) {  // rows in other tiles: the same sums in another order
            if (int64_t(k % size_t(rows)) < 5) ASSERT_TRUE(std::isnan(part[k])) << what << " at " << k;
            else ASSERT_LE(std::fabs(part[k] - got[k]), 1e-5f * (1.0f + std::fabs(got[k]))) << what << " at " << k;
          }
        }
      for (int n : {1, 3, 6}) {  // outliers, in decode (one row: codes rebuilt in registers; GEMV rows) and prefill
        std::vector<float> X = randn(size_t(n) * size_t(cols), rng), small = X;
        for (int i = 0; i < n; ++i) {
          X[size_t(i) * size_t(cols) + size_t(7 + 40 * i) % size_t(cols)] = 1e4f * float(i % 2 ? -1 : 1);
          small[size_t(i) * size_t(cols) + size_t(7 + 40 * i) % size_t(cols)] = 0.0f;
        }
        std::vector<float> ref(size_t(n) * size_t(rows)), ref_small(ref.size()), got(ref.size(), NAN);
        ref::matmul(m, X.data(), n, ref.data());
        ref::matmul(m, small.data(), n, ref_small.data());
        fast::QuantX qx;
        fast::quantize_x(X.data(), n, int(cols), true, qx);
        ASSERT_GT(qx.n_out[0], 0);
        fast::q6k_rows_avx512(m, 0, rows, qx, true, got.data());
        double ss = 0;
        for (float v : ref_small) ss += double(v) * v;
        const double small_rms = std::sqrt(ss / double(ref_small.size()));
        for (size_t k = 0; k < got.size(); ++k)
          ASSERT_LE(std::fabs(got[k] - ref[k]), 5e-3 * small_rms + 1e-6 * std::fabs(ref[k]))
              << rows << "x" << cols << " n=" << n << " outliers, at " << k;
      }
    }
}

// Dense f32 matrices (GGUF's router and shared-expert gate) on the f32 kernels of the SIMD tiers: the reference's
// sums in another order; the AVX2 tier gives the AVX-512 tier's bits.
TEST(GgufFastPaths, DenseF32MatchesReference) {
  std::mt19937 rng(21);
  for (int64_t cols : {512, 2048})
    for (int n : {1, 5}) {
      const int64_t rows = 37;
      const std::vector<float> w = randn(size_t(rows * cols), rng, 0.05f), X = randn(size_t(n) * size_t(cols), rng);
      QMatrix m;
      m.kind = QMatrix::Kind::Dense;
      m.dtype = DType::F32;
      m.rows = rows;
      m.cols = cols;
      m.w = w.data();
      std::vector<float> ref(size_t(n) * size_t(rows));
      ref::matmul(m, X.data(), n, ref.data());
      std::vector<std::vector<float>> by_tier;
      for (fast::Isa isa : tiers()) {
        fast::set_isa_override(isa);
        std::vector<float> y(ref.size(), NAN);
        fast::matmul(m, X.data(), n, y.data(), true);
        fast::clear_isa_override();
        EXPECT_LE(testmetrics::rms_rel_err(y, ref), 1e-6) << fast::isa_name(isa) << " cols " << cols << " n " << n;
        if (isa != fast::Isa::Portable) by_tier.push_back(y);
      }
      if (by_tier.size() == 2) {
        for (size_t k = 0; k < ref.size(); ++k) ASSERT_EQ(by_tier[0][k], by_tier[1][k]) << "avx2 vs avx512 at " << k;
      }
    }
}

// --synthetic-format gguf-q4km: the GGUF made in memory goes through the GGUF loader (KS8 Q4_K, Q6_K blocks, Q8_0
// repacks, as the load log of a file says), and an unknown format is refused naming the known ones.
TEST(GgufFastPaths, SyntheticQ4kmFormatLoadsThroughTheGgufLoader) {
  ::testing::internal::CaptureStderr();
  auto w = make_synthetic_in_format("small", 3, "gguf-q4km");
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(w->layout, "gguf");
  EXPECT_NE(log.find("Q6_K -> its own blocks"), std::string::npos) << log;
  EXPECT_EQ(w->lm_head.kind, QMatrix::Kind::Ggml);
  EXPECT_EQ(w->layers[0].lin.in_qkv.sdtype, DType::KS8);
  EXPECT_EQ(w->layers[0].moe.down.e[0].bits, 8);  // 128 columns, below a 256-block: Q8_0, repacked to 8-bit
  try {
    make_synthetic_in_format("small", 3, "gguf-q9");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("known: mlx-4bit, fp8, gguf-q4km"), std::string::npos) << e.what();
  }
}
