// The fast CPU 4-bit kernels on group-32 matrices (GGUF Q4_0 / Q4_1 / Q4_K repacks: f32 scales, each half of a
// 64-element activation group with its own scale, bias and Σx): portable, AVX2 and AVX-512 kernels against the f32
// reference and against each other on the same quantised activations, and whole products through matmul_batch
// (a group-32 and a group-64 job sharing one X) on every tier this CPU has, and GGUF Q4_0 / Q4_1 models on `cpu`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gguf_convert_util.h"
#include "loader_test_util.h"
#include "quant_test_util.h"
#include "test_metrics.h"
#include "core/dtype.h"
#include "cpu/fast/cpu_isa.h"
#include "cpu/fast/fast_matmul.h"
#include "cpu/fast/q4_kernels.h"
#include "cpu/ref_ops.h"

using namespace lily;

namespace {

struct RandQ4G {  // a random 4-bit affine matrix [rows, cols] with f32 scales and biases per `group`
  std::vector<uint32_t> w;
  std::vector<float> s, b;
  QMatrix m;
  RandQ4G(int rows, int cols, int group, std::mt19937& rng) {
    std::uniform_int_distribution<uint32_t> u;
    std::normal_distribution<float> nd(0.0f, 0.02f);
    w.resize(static_cast<size_t>(rows) * cols / 8);
    for (auto& x : w) x = u(rng);
    s.resize(static_cast<size_t>(rows) * cols / group);
    b.resize(s.size());
    for (auto& x : s) x = nd(rng);
    for (auto& x : b) x = nd(rng) * 8;
    m.kind = QMatrix::Kind::Affine;
    m.bits = 4;
    m.group = group;
    m.rows = rows;
    m.cols = cols;
    m.w = w.data();
    m.scales = s.data();
    m.biases = b.data();
    m.sdtype = DType::F32;
  }
};

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool has_isa(fast::Isa isa) { return static_cast<int>(fast::detected_isa()) >= static_cast<int>(isa); }

}  // namespace

// Portable kernel vs the f32 reference (the bounds of Q4PortableMatchesReference: 2e-4 precise, 2e-2 8-bit x).
TEST(CpuFastG32, PortableMatchesReference) {
  for (int n : {1, 3, 8})
    for (int cols : {64, 128, 192, 2048})
      for (bool precise : {true, false}) {
        std::mt19937 rng(cols * 7 + n);
        RandQ4G q(37, cols, 32, rng);
        const std::vector<float> X = randn(static_cast<size_t>(n) * cols, rng);
        std::vector<float> ref(static_cast<size_t>(n) * 37), got(ref.size(), NAN);
        ref::matmul(q.m, X.data(), n, ref.data());
        fast::QuantX qx;
        fast::quantize_x(X.data(), n, cols, precise, qx, true);
        fast::q4_rows_portable(q.m, 0, 37, qx, precise, got.data());
        EXPECT_LE(testmetrics::rms_rel_err(got, ref), precise ? 2e-4 : 2e-2)
            << "cols " << cols << " n " << n << " precise " << precise;
      }
}

// AVX-512 kernel (decode quads, 16-row tiles, remainder rows) vs the portable one on the same activations: the
// integer sums are equal, only the f32 accumulation order differs (1e-6, as for group 64).
TEST(CpuFastG32, Avx512MatchesPortableOnTheSameActivations) {
  if (!fast::q4_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (int n : {1, 3, 4, 5, 16, 131})
    for (int rows : {16, 37, 64})
      for (int cols : {64, 192, 512, 2048})
        for (bool precise : {false, true}) {
          std::mt19937 rng(rows * 131 + cols * 7 + n);
          RandQ4G q(rows, cols, 32, rng);
          const std::vector<float> X = randn(static_cast<size_t>(n) * cols, rng);
          fast::QuantX qx;
          fast::quantize_x(X.data(), n, cols, precise, qx, true);
          std::vector<float> ref(static_cast<size_t>(n) * rows, NAN), got(ref.size(), NAN);
          fast::q4_rows_portable(q.m, 0, rows, qx, precise, ref.data());
          fast::q4_rows_avx512(q.m, 0, rows, qx, precise, got.data());
          const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n) +
                                   " precise=" + std::to_string(precise);
          EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-6) << what;
          std::vector<float> part(ref.size(), NAN);  // a row range starting inside the matrix
          fast::q4_rows_avx512(q.m, 16, rows, qx, precise, part.data());
          for (int i = 0; i < n; ++i)
            for (int r = 16; r < rows; ++r) {
              const float a = part[static_cast<size_t>(i) * rows + r], b = ref[static_cast<size_t>(i) * rows + r];
              ASSERT_LE(std::fabs(a - b), 1e-5f * (1.0f + std::fabs(b))) << what << " row " << r;
            }
        }
}

// The AVX2 kernel on group 32 (decode quads with 4-lane scale halves, 8-row tiles summing dwords 0-3 / 4-7 on their
// own) on the same activations: bit-identical to the AVX-512 kernel where this CPU has it, within accumulation
// order of the portable one.
TEST(CpuFastG32, Avx2MatchesAvx512AndPortable) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  for (int n : {1, 3, 4, 5, 16, 131})
    for (int rows : {16, 37, 64})
      for (int cols : {64, 192, 512, 2048})
        for (bool precise : {false, true}) {
          std::mt19937 rng(rows * 131 + cols * 7 + n + 17);
          RandQ4G q(rows, cols, 32, rng);
          const std::vector<float> X = randn(static_cast<size_t>(n) * cols, rng);
          fast::QuantX qx;
          fast::quantize_x(X.data(), n, cols, precise, qx, true);
          std::vector<float> ref(static_cast<size_t>(n) * rows, NAN), got(ref.size(), NAN), v512(ref.size(), NAN);
          fast::q4_rows_portable(q.m, 0, rows, qx, precise, ref.data());
          fast::q4_rows_avx2(q.m, 0, rows, qx, precise, got.data());
          const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n) +
                                   " precise=" + std::to_string(precise);
          EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-6) << what;
          if (fast::q4_avx512_available()) {
            fast::q4_rows_avx512(q.m, 0, rows, qx, precise, v512.data());
            for (size_t k = 0; k < got.size(); ++k) ASSERT_EQ(got[k], v512[k]) << what << " at " << k;
          }
          std::vector<float> part(ref.size(), NAN);  // a row range starting inside the matrix (decode quads at 5)
          fast::q4_rows_avx2(q.m, 5, rows, qx, precise, part.data());
          for (int i = 0; i < n; ++i)
            for (int r = 0; r < rows; ++r) {
              const float a = part[static_cast<size_t>(i) * rows + r], b = ref[static_cast<size_t>(i) * rows + r];
              if (r < 5) ASSERT_TRUE(std::isnan(a)) << what << " row " << r;
              else ASSERT_LE(std::fabs(a - b), 1e-5f * (1.0f + std::fabs(b))) << what << " row " << r;
            }
        }
}

// matmul_batch with a group-32 and a group-64 matrix on one X (quantised once, with the halves' sums), decode and
// prefill, on each tier this CPU has; the precise bound of BatchOfJobsMatchesReference.
TEST(CpuFastG32, BatchWithSharedXMatchesReferenceOnEveryTier) {
  std::vector<fast::Isa> tiers = {fast::Isa::Portable};
  if (has_isa(fast::Isa::Avx2)) tiers.push_back(fast::Isa::Avx2);
  if (has_isa(fast::Isa::Avx512)) tiers.push_back(fast::Isa::Avx512);
  for (fast::Isa isa : tiers)
    for (int n : {1, 40}) {
      fast::set_isa_override(isa);
      std::mt19937 rng(11 + n);
      RandQ4G a(300, 512, 32, rng), b(77, 512, 64, rng);
      const std::vector<float> X = randn(static_cast<size_t>(n) * 512, rng);
      std::vector<float> ra(static_cast<size_t>(n) * 300), rb(static_cast<size_t>(n) * 77);
      ref::matmul(a.m, X.data(), n, ra.data());
      ref::matmul(b.m, X.data(), n, rb.data());
      std::vector<float> ya(ra.size(), NAN), yb(rb.size(), NAN);
      const fast::MatJob jobs[2] = {{&b.m, X.data(), n, yb.data()}, {&a.m, X.data(), n, ya.data()}};
      fast::matmul_batch(jobs, 2, true);
      fast::clear_isa_override();
      EXPECT_LE(testmetrics::rms_rel_err(ya, ra), 2e-4) << fast::isa_name(isa) << " n " << n;
      EXPECT_LE(testmetrics::rms_rel_err(yb, rb), 2e-4) << fast::isa_name(isa) << " n " << n;
    }
}

// The tiny fixture as GGUF Q4_0 and Q4_1 (every matrix group-32 4-bit) on the fast `cpu` backend against cpu-ref:
// top-1 equal, prompt logits within the fast path's bound on the tiny fixtures (2e-2, test_model_tiny.cpp).
// Measured 0.0033 (Q4_0) and 0.0022 (Q4_1) with the codes centred by QuantX::res8; 0.0211 and 0.0069 before.
TEST(CpuFastG32, GgufQ4FilesMatchTheReferencePath) {
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_1}) {
    lily_test::TempDir d;
    const std::string path = d / "m.gguf";
    lily_test::convert_tiny_to_gguf(lily_test::tiny("model-bf16"), path, {t, false, false});
    ::testing::internal::CaptureStderr();
    auto w = load_model(path);
    ::testing::internal::GetCapturedStderr();
    const auto a = lily_test::logits_of(w, "cpu-ref"), b = lily_test::logits_of(w, "cpu");
    const int V = w->cfg.vocab, n = int(a.size()) / V;
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      const float* x = a.data() + size_t(r) * V;
      const float* y = b.data() + size_t(r) * V;
      EXPECT_EQ(std::max_element(x, x + V) - x, std::max_element(y, y + V) - y) << "position " << r;
      for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(x[i]) - y[i]));
    }
    std::printf("[ gguf %s cpu vs cpu-ref ] max |dlogit| %.3g\n", ggml_type_name(uint32_t(t)).c_str(), worst);
    EXPECT_LE(worst, 2e-2) << ggml_type_name(uint32_t(t));
  }
}
