// Fast CPU kernels against the reference kernels on random matrices (fresh inputs, poisoned outputs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "test_metrics.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/fast/fast_matmul.h"
#include "cpu/fast/q4_kernels.h"
#include "cpu/fast/quant_x.h"
#include "cpu/ref_ops.h"

using namespace lily;

namespace {

struct RandQ4 {  // owns a random 4-bit affine matrix [rows, cols], groups of `group` (bf16 scales and biases)
  std::vector<uint32_t> w;
  std::vector<uint16_t> s, b;
  QMatrix m;
  RandQ4(int rows, int cols, int bits, std::mt19937& rng, int group = 64) {
    std::uniform_int_distribution<uint32_t> u;
    std::normal_distribution<float> nd(0.0f, 0.02f);
    w.resize(static_cast<size_t>(rows) * cols * bits / 32);
    for (auto& x : w) x = u(rng);
    s.resize(static_cast<size_t>(rows) * cols / group);
    b.resize(s.size());
    for (auto& x : s) x = f32_to_bf16(nd(rng));
    for (auto& x : b) x = f32_to_bf16(nd(rng) * 8);
    m.kind = QMatrix::Kind::Affine;
    m.bits = bits;
    m.group = group;
    m.rows = rows;
    m.cols = cols;
    m.w = w.data();
    m.scales = s.data();
    m.biases = b.data();
    m.sdtype = DType::BF16;
  }
};


void check_q4(int rows, int cols, int n, bool precise, double tol, bool simd) {
  std::mt19937 rng(rows * 31 + cols * 7 + n);
  RandQ4 q(rows, cols, 4, rng);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> X(static_cast<size_t>(n) * cols);
  for (auto& x : X) x = nd(rng);
  std::vector<float> ref(static_cast<size_t>(n) * rows), got(ref.size(), NAN);
  ref::matmul(q.m, X.data(), n, ref.data());
  if (simd) {
    fast::matmul(q.m, X.data(), n, got.data(), precise);
  } else {
    fast::QuantX qx;
    fast::quantize_x(X.data(), n, cols, precise, qx);
    fast::q4_rows_portable(q.m, 0, rows, qx, precise, got.data());
  }
  double e = testmetrics::rms_rel_err(got, ref);
  EXPECT_LE(e, tol) << rows << "x" << cols << " n=" << n << " precise=" << precise << " simd=" << simd;
}

}  // namespace

TEST(CpuFastKernels, Q4PortableMatchesReference) {
  for (int n : {1, 3, 8})
    for (int cols : {64, 128, 192, 2048}) {
      check_q4(37, cols, n, true, 2e-4, false);
      check_q4(37, cols, n, false, 2e-2, false);
    }
}

TEST(CpuFastKernels, Q4SimdMatchesReference) {
  if (!fast::q4_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (int n : {1, 3, 4, 9, 40})
    for (int cols : {64, 128, 192, 512, 2048}) {
      check_q4(37, cols, n, true, 2e-4, true);
      check_q4(37, cols, n, false, 2e-2, true);
    }
}

// The SIMD kernel against the portable one on the same quantised activations: the integer dot products are
// identical, only the f32 accumulation order differs. Covers the 16-row tile GEMM (n >= kTileMinRows) with
// row counts that are not multiples of 16, odd group counts, and more activation rows than one block (128).
TEST(CpuFastKernels, Q4SimdMatchesPortableOnTheSameActivations) {
  if (!fast::q4_avx512_available()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  for (int n : {1, 4, 5, 16, 131})
    for (int rows : {16, 37, 64})
      for (int cols : {64, 192, 512, 2048})
        for (bool precise : {false, true}) {
          std::mt19937 rng(rows * 131 + cols * 7 + n);
          RandQ4 q(rows, cols, 4, rng);
          std::normal_distribution<float> nd(0.0f, 1.0f);
          std::vector<float> X(static_cast<size_t>(n) * cols);
          for (auto& x : X) x = nd(rng);
          fast::QuantX qx;
          fast::quantize_x(X.data(), n, cols, precise, qx);
          std::vector<float> ref(static_cast<size_t>(n) * rows, NAN), got(ref.size(), NAN);
          fast::q4_rows_portable(q.m, 0, rows, qx, precise, ref.data());
          fast::q4_rows_avx512(q.m, 0, rows, qx, precise, got.data());
          EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-6) << rows << "x" << cols << " n=" << n << " precise=" << precise;
          // a row range that starts inside the matrix (the thread pool's tasks)
          std::vector<float> part(ref.size(), NAN);
          fast::q4_rows_avx512(q.m, 16, rows, qx, precise, part.data());
          for (int i = 0; i < n; ++i)
            for (int r = 16; r < rows; ++r) {
              const float a = part[static_cast<size_t>(i) * rows + r], b = ref[static_cast<size_t>(i) * rows + r];
              ASSERT_LE(std::fabs(a - b), 1e-5f * (1.0f + std::fabs(b))) << "row " << r << " act " << i;
            }
        }
}

// The SIMD activation quantisation against the scalar one: identical codes and scales, Σx within rounding.
TEST(CpuFastKernels, QuantizeXMatchesScalar) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int cols : {64, 192, 2048})
    for (bool precise : {false, true}) {
      const int n = 7;
      std::vector<float> X(static_cast<size_t>(n) * cols);
      for (auto& x : X) x = nd(rng) * (1 + (&x - X.data()) % 5);
      X[3] = 0.0f;
      std::fill(X.begin() + cols, X.begin() + cols + 64, 0.0f);  // an all-zero group
      fast::QuantX a, b;
      fast::quantize_x_ref(X.data(), n, cols, precise, a);
      fast::quantize_x(X.data(), n, cols, precise, b);
      const size_t codes = static_cast<size_t>(n) * a.P * 128;
      for (size_t i = 0; i < codes; ++i) {
        ASSERT_EQ(a.hi[i], b.hi[i]) << "hi " << i;
        if (precise) {
          ASSERT_EQ(a.lo[i], b.lo[i]) << "lo " << i;
        }
      }
      for (size_t i = 0; i < static_cast<size_t>(n) * a.P * 16; ++i) ASSERT_EQ(a.dx[i], b.dx[i]);
      for (size_t i = 0; i < static_cast<size_t>(n) * a.G; ++i) {
        ASSERT_EQ(a.dxg[i], b.dxg[i]);
        ASSERT_NEAR(a.sum[i], b.sum[i], 1e-5 * 64 * 5);
      }
    }
}

// matmul_batch as the backend uses it: many jobs, some sharing X, row counts that are not multiples of 16 or
// of the task size, decode batches (every job n = 1: tasks of up to 512 rows) and prefill batches (tile GEMM).
TEST(CpuFastKernels, BatchOfJobsMatchesReference) {
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (bool decode : {true, false})
    for (bool precise : {false, true}) {
      const int shapes[][2] = {{1100, 128}, {37, 128}, {512, 192}, {16, 64}, {700, 128}};
      std::vector<RandQ4> mats;
      mats.reserve(5);
      for (auto& sh : shapes) mats.emplace_back(sh[0], sh[1], 4, rng);
      std::vector<std::vector<float>> xs(5), ys(5), refs(5);
      std::vector<fast::MatJob> jobs;
      for (int j = 0; j < 5; ++j) {
        const int n = decode ? 1 : 3 + 7 * j;
        const int cols = shapes[j][1];
        if (j == 4) {  // shares job 0's X (quantised once)
          xs[4] = xs[0];
        } else {
          xs[j].resize(static_cast<size_t>(n) * cols);
          for (auto& x : xs[j]) x = nd(rng);
        }
        const int nj = j == 4 ? static_cast<int>(xs[0].size() / cols) : n;
        ys[j].assign(static_cast<size_t>(nj) * shapes[j][0], NAN);
        refs[j].resize(ys[j].size());
        ref::matmul(mats[j].m, xs[j].data(), nj, refs[j].data());
      }
      for (int j = 0; j < 5; ++j)
        jobs.push_back({&mats[j].m, j == 4 ? xs[0].data() : xs[j].data(),
                        static_cast<int>(xs[j].size() / shapes[j][1]), ys[j].data()});
      fast::matmul_batch(jobs.data(), static_cast<int>(jobs.size()), precise);
      for (int j = 0; j < 5; ++j)
        EXPECT_LE(testmetrics::rms_rel_err(ys[j], refs[j]), precise ? 2e-4 : 2e-2)
            << "job " << j << " decode=" << decode << " precise=" << precise;
    }
}

TEST(CpuFastKernels, GenericPathMatchesReference) {
  std::mt19937 rng(5);
  RandQ4 q(50, 128, 8, rng);  // 8-bit goes through the generic decode-and-dot path
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> X(3 * 128);
  for (auto& x : X) x = nd(rng);
  std::vector<float> ref(3 * 50), got(ref.size(), NAN);
  ref::matmul(q.m, X.data(), 3, ref.data());
  fast::matmul(q.m, X.data(), 3, got.data(), true);
  EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-5);
}

// "Massive activations": rows with a few elements 1e3..1e5 times the others (an MLP intermediate at 1e5 beside
// values near 1; a normed residual with two channels at 22 beside values near 0.005). Precise codes are relative to
// the group's largest |x|, so without taking the outliers out the small values of their group are lost; with it
// every row stays within 5e-3 of the double-precision product of its small part (the part the outliers bury).
TEST(CpuFastKernels, Q4OutliersKeepTheSmallValues) {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int group : {64, 32})
  for (int cols : {64, 512})
    for (int n : {6, 40}) {  // decode-sized and tile-GEMM-sized batches
      const int rows = 37;
      RandQ4 q(rows, cols, 4, rng, group);
      std::vector<float> X(static_cast<size_t>(n) * cols), small(X.size());
      for (int i = 0; i < n; ++i) {
        float* x = &X[static_cast<size_t>(i) * cols];
        const float sc = i % 3 == 2 ? 0.005f : 1.0f;
        for (int c = 0; c < cols; ++c) x[c] = nd(rng) * sc;
        std::copy(x, x + cols, &small[static_cast<size_t>(i) * cols]);
        if (i % 3 == 1)
          for (int c : {0, 1, 2, 3}) x[c] = (c % 2 ? -1.0f : 1.0f) * 1e5f * (1.0f + 0.1f * static_cast<float>(c));
        if (i % 3 == 2) {
          x[5] = 22.0f;
          x[cols - 3] = -11.0f;
        }
        for (int c = 0; c < cols; ++c)
          if (std::fabs(x[c]) > 10.0f) small[static_cast<size_t>(i) * cols + c] = 0.0f;
      }
      std::vector<float> wrow(static_cast<size_t>(cols)), got(static_cast<size_t>(n) * rows, NAN);
      fast::matmul(q.m, X.data(), n, got.data(), true);
      for (int i = 0; i < n; ++i) {
        double err2 = 0, small2 = 0;
        for (int r = 0; r < rows; ++r) {
          dequant_row(q.m, r, wrow.data());
          double full = 0, part = 0;
          for (int c = 0; c < cols; ++c) {
            full += double(X[static_cast<size_t>(i) * cols + c]) * wrow[static_cast<size_t>(c)];
            part += double(small[static_cast<size_t>(i) * cols + c]) * wrow[static_cast<size_t>(c)];
          }
          const double d = double(got[static_cast<size_t>(i) * rows + r]) - full;
          err2 += d * d;
          small2 += part * part;
        }
        EXPECT_LE(std::sqrt(err2 / small2), 5e-3) << "group " << group << " cols " << cols << " n " << n << " row " << i;
      }
    }
}

TEST(CpuFastKernels, FindOutliers) {
  std::vector<float> x(256, 0.5f);
  int32_t col[fast::kMaxOutliers];
  float val[fast::kMaxOutliers];
  EXPECT_EQ(fast::find_outliers(x.data(), 256, col, val), 0);
  x[7] = 31.0f;  // 62x typical: kept in the codes
  EXPECT_EQ(fast::find_outliers(x.data(), 256, col, val), 0);
  x[9] = -40.0f;  // 80x
  x[200] = 1e5f;
  ASSERT_EQ(fast::find_outliers(x.data(), 256, col, val), 2);
  EXPECT_EQ(col[0], 200);
  EXPECT_EQ(val[0], 1e5f);
  EXPECT_EQ(col[1], 9);
  EXPECT_EQ(val[1], -40.0f);
  for (int c = 0; c < 9; ++c) x[static_cast<size_t>(c) * 20] = 1e4f;  // more than kMaxOutliers: the largest 8
  EXPECT_EQ(fast::find_outliers(x.data(), 256, col, val), fast::kMaxOutliers);
  x.assign(256, 0.0f);
  EXPECT_EQ(fast::find_outliers(x.data(), 256, col, val), 0);
  x[3] = NAN;
  EXPECT_EQ(fast::find_outliers(x.data(), 256, col, val), 0);
}

#include "cpu/fast/seq_kernels.h"

TEST(CpuFastKernels, GdnStepMatchesReferenceAtRealSizes) {
  const int Hk = 4, Hv = 8, Dk = 128, Dv = 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n, float sc) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng) * sc;
    return v;
  };
  auto S0 = rnd(size_t(Hv) * Dv * Dk, 0.1f), q = rnd(Hk * Dk, 0.09f), k = rnd(Hk * Dk, 0.09f), v = rnd(Hv * Dv, 1.0f);
  std::vector<float> g(Hv), beta(Hv);
  for (int j = 0; j < Hv; ++j) {
    g[j] = -0.1f * (j + 1);
    beta[j] = 0.3f + 0.05f * j;
  }
  auto S1 = S0, S2 = S0;
  std::vector<float> o1(Hv * Dv), o2(Hv * Dv, NAN);
  for (int step = 0; step < 3; ++step) {
    ref::gdn_step(S1.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), Hk, Hv, Dk, Dv, o1.data());
    fast::gdn_step(S2.data(), q.data(), k.data(), v.data(), g.data(), beta.data(), Hk, Hv, Dk, Dv, o2.data());
  }
  EXPECT_LE(testmetrics::rms_rel_err(o2, o1), 1e-5);
  EXPECT_LE(testmetrics::rms_rel_err(S2, S1), 1e-5);
}

// The chunk scan (head-major over n tokens) against n reference steps, inputs as rows of one [n][xs] buffer.
TEST(CpuFastKernels, GdnScanMatchesReferenceSteps) {
  const int Hk = 4, Hv = 8, Dk = 128, Dv = 128, n = 9;
  const size_t xs = 2 * Hk * Dk + Hv * Dv + 16;  // padded rows: the stride is honoured
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n * xs), g(n * Hv), beta(n * Hv), S0(size_t(Hv) * Dv * Dk);
  for (auto& e : x) e = nd(rng) * 0.09f;
  for (auto& e : S0) e = nd(rng) * 0.1f;
  for (int t = 0; t < n; ++t) {
    for (int i = 0; i < Hv * Dv; ++i) x[t * xs + 2 * Hk * Dk + i] = nd(rng);  // v
    for (int j = 0; j < Hv; ++j) {
      g[t * Hv + j] = -0.05f * (j + 1) - 0.01f * t;
      beta[t * Hv + j] = 0.2f + 0.05f * j;
    }
  }
  auto S1 = S0, S2 = S0;
  std::vector<float> o1(size_t(n) * Hv * Dv), o2(o1.size(), NAN);
  for (int t = 0; t < n; ++t)
    ref::gdn_step(S1.data(), &x[t * xs], &x[t * xs + Hk * Dk], &x[t * xs + 2 * Hk * Dk], &g[t * Hv], &beta[t * Hv], Hk,
                  Hv, Dk, Dv, &o1[size_t(t) * Hv * Dv]);
  fast::gdn_scan(S2.data(), x.data(), x.data() + Hk * Dk, x.data() + 2 * Hk * Dk, xs, g.data(), beta.data(), n, Hk, Hv,
                 Dk, Dv, o2.data());
  EXPECT_LE(testmetrics::rms_rel_err(o2, o1), 1e-5);
  EXPECT_LE(testmetrics::rms_rel_err(S2, S1), 1e-5);
  // rewind points (a speculative verify's): the state after each of the first ns tokens, equal to the state a scan
  // of that many tokens leaves, in both implementations
  const int ns = n - 2;
  const size_t ss = S0.size();
  for (int fast_set = 0; fast_set < 2; ++fast_set) {
    auto scan = fast_set ? &fast::gdn_scan : &ref::gdn_scan;
    auto S3 = S0;
    std::vector<float> snaps(size_t(ns) * ss, NAN), o3(o1.size());
    scan(S3.data(), x.data(), x.data() + Hk * Dk, x.data() + 2 * Hk * Dk, xs, g.data(), beta.data(), n, Hk, Hv, Dk, Dv,
         o3.data(), snaps.data(), ns);
    for (int t = 0; t < ns; ++t) {
      auto S4 = S0;
      scan(S4.data(), x.data(), x.data() + Hk * Dk, x.data() + 2 * Hk * Dk, xs, g.data(), beta.data(), t + 1, Hk, Hv,
           Dk, Dv, o3.data(), nullptr, 0);
      EXPECT_TRUE(std::equal(S4.begin(), S4.end(), snaps.begin() + std::ptrdiff_t(t * ss))) << fast_set << " " << t;
    }
  }
}

TEST(CpuFastKernels, AttentionMatchesReferenceShortAndSplit) {
  for (int T : {1, 7, 65, 300, 2000, 40000}) {  // 40000: long context, blocks of 5000 positions
    const int nq = 16, nkv = 2, hd = 256;
    std::mt19937 rng(T);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(nq * hd), kc(size_t(T) * nkv * hd), vc(kc.size());
    for (auto& x : q) x = nd(rng);
    for (auto& x : kc) x = nd(rng);
    for (auto& x : vc) x = nd(rng);
    std::vector<float> a(nq * hd), b(nq * hd, NAN);
    ref::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, a.data());
    fast::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, b.data());
    EXPECT_LE(testmetrics::rms_rel_err(b, a), 1e-5) << "T=" << T;
  }
}

#include "cpu/fast/cpu_isa.h"

// Other GQA groups (8, 4, 2, 1 query heads per KV head), head sizes and more KV heads than one pass takes (4),
// on both SIMD tiers (bit-identical to each other).
TEST(CpuFastKernels, AttentionOtherShapesMatchReference) {
  struct Shape {
    int nq, nkv, hd;
  };
  const bool avx512 = fast::active_isa() == fast::Isa::Avx512;
  for (const Shape sh : {Shape{8, 1, 128}, Shape{8, 2, 128}, Shape{12, 6, 64}, Shape{5, 5, 96}})
    for (int T : {1, 33, 700}) {
      std::mt19937 rng(T * 31 + sh.nq);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      std::vector<float> q(size_t(sh.nq) * sh.hd), kc(size_t(T) * sh.nkv * sh.hd), vc(kc.size());
      for (auto& x : q) x = nd(rng);
      for (auto& x : kc) x = nd(rng);
      for (auto& x : vc) x = nd(rng);
      std::vector<float> a(q.size()), b(q.size(), NAN), c(q.size(), NAN);
      ref::attention_one(q.data(), kc.data(), vc.data(), T, sh.nq, sh.nkv, sh.hd, a.data());
      fast::attention_one(q.data(), kc.data(), vc.data(), T, sh.nq, sh.nkv, sh.hd, b.data());
      EXPECT_LE(testmetrics::rms_rel_err(b, a), 1e-5) << "T=" << T << " nq=" << sh.nq << " nkv=" << sh.nkv;
      if (avx512) {
        fast::set_isa_override(fast::Isa::Avx2);
        fast::attention_one(q.data(), kc.data(), vc.data(), T, sh.nq, sh.nkv, sh.hd, c.data());
        fast::clear_isa_override();
        EXPECT_EQ(0, std::memcmp(b.data(), c.data(), b.size() * sizeof(float))) << "T=" << T << " nq=" << sh.nq;
      }
    }
}

TEST(CpuFastKernels, DenseBf16MatchesReference) {
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int rows = 45, cols = 272;
  std::vector<uint16_t> w(size_t(rows) * cols);
  for (auto& x : w) x = f32_to_bf16(nd(rng) * 0.05f);
  QMatrix m;
  m.kind = QMatrix::Kind::Dense;
  m.dtype = DType::BF16;
  m.rows = rows;
  m.cols = cols;
  m.w = w.data();
  for (int n : {1, 5}) {
    std::vector<float> X(size_t(n) * cols);
    for (auto& x : X) x = nd(rng);
    std::vector<float> ref(size_t(n) * rows), got(ref.size(), NAN);
    ref::matmul(m, X.data(), n, ref.data());
    fast::matmul(m, X.data(), n, got.data(), true);
    EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-5) << "n=" << n;
  }
}

// ---- AVX2 tier ----------------------------------------------------------------------------------------------
#include "cpu/fast/cpu_isa.h"

namespace {

bool has_isa(fast::Isa isa) { return static_cast<int>(fast::detected_isa()) >= static_cast<int>(isa); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(CpuFastKernels, IsaNamesParseAndUnsupportedTiersAreErrors) {
  EXPECT_EQ(fast::parse_isa("avx2", fast::Isa::Avx512), fast::Isa::Avx2);
  EXPECT_EQ(fast::parse_isa("portable", fast::Isa::Portable), fast::Isa::Portable);
  EXPECT_EQ(fast::parse_isa("avx512", fast::Isa::Avx512), fast::Isa::Avx512);
  EXPECT_THROW(fast::parse_isa("avx512", fast::Isa::Avx2), Error);
  EXPECT_THROW(fast::parse_isa("avx2", fast::Isa::Portable), Error);
  EXPECT_THROW(fast::parse_isa("sse4", fast::Isa::Avx512), Error);
  EXPECT_THROW(fast::parse_isa("", fast::Isa::Avx512), Error);
  for (fast::Isa i : {fast::Isa::Portable, fast::Isa::Avx2, fast::Isa::Avx512})
    EXPECT_EQ(fast::parse_isa(fast::isa_name(i), fast::Isa::Avx512), i);
}

// Our cpuid / xgetbv detection agrees with the compiler runtime's (which also checks the OS register state).
TEST(CpuFastKernels, DetectedIsaAgreesWithCompilerRuntime) {
#if defined(__x86_64__)
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const bool avx512 = fast::q4_avx512_available();
  const fast::Isa want = avx512 ? fast::Isa::Avx512 : avx2 ? fast::Isa::Avx2 : fast::Isa::Portable;
  EXPECT_EQ(fast::detected_isa(), want);
#else
  EXPECT_EQ(fast::detected_isa(), fast::Isa::Portable);
#endif
  if (fast::detected_isa() != fast::Isa::Avx512) {  // a tier above the CPU's cannot be forced
    EXPECT_THROW(fast::set_isa_override(static_cast<fast::Isa>(static_cast<int>(fast::detected_isa()) + 1)), Error);
  }
}

// AVX2 activation quantisation: codes and scales identical to the scalar reference; with AVX-512 present, every
// output (Σx included) bit-identical to the AVX-512 quantisation.
TEST(CpuFastKernels, QuantizeXAvx2MatchesScalarAndAvx512) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int cols : {64, 192, 2048})
    for (bool precise : {false, true}) {
      const int n = 5;
      std::vector<float> X(static_cast<size_t>(n) * cols);
      for (auto& x : X) x = nd(rng) * (1 + (&x - X.data()) % 7);
      X[5] = 0.0f;
      std::fill(X.begin() + cols, X.begin() + cols + 64, 0.0f);  // an all-zero group
      X[2 * cols + 7] = 127.5f;                                  // codes at the ends of the range
      X[2 * cols + 8] = -127.5f;
      fast::QuantX a, b, c;
      fast::quantize_x_ref(X.data(), n, cols, precise, a);
      fast::quantize_x_isa(fast::Isa::Avx2, X.data(), n, cols, precise, b);
      const size_t codes = static_cast<size_t>(n) * a.P * 128;
      for (size_t i = 0; i < codes; ++i) {
        ASSERT_EQ(a.hi[i], b.hi[i]) << "hi " << i << " cols " << cols;
        if (precise) {
          ASSERT_EQ(a.lo[i], b.lo[i]) << "lo " << i;
        }
      }
      for (size_t i = 0; i < static_cast<size_t>(n) * a.P * 16; ++i) ASSERT_EQ(a.dx[i], b.dx[i]);
      for (size_t i = 0; i < static_cast<size_t>(n) * a.G; ++i) {
        ASSERT_EQ(a.dxg[i], b.dxg[i]);
        ASSERT_NEAR(a.sum[i], b.sum[i], 1e-5 * 64 * 7);
      }
      if (!has_isa(fast::Isa::Avx512)) continue;
      fast::quantize_x_isa(fast::Isa::Avx512, X.data(), n, cols, precise, c);
      for (size_t i = 0; i < static_cast<size_t>(n) * a.G; ++i) ASSERT_EQ(b.sum[i], c.sum[i]) << "sum " << i;
    }
}

// The AVX2 4-bit kernel on the same quantised activations as the portable and AVX-512 ones: within f32
// accumulation-order rounding of the portable kernel, and bit-identical to the AVX-512 kernel (same integer
// sums, same float operations in the same order). Decode (n < 4: 4-row GEMV, nr = 1..3 at the end), prefill
// (16-row tiles as two 8-row AVX2 tiles, remainder rows one at a time), odd group counts, more activation rows
// than one block (128), row ranges that start inside the matrix.
TEST(CpuFastKernels, Q4Avx2MatchesPortableAndAvx512) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  const bool avx512 = has_isa(fast::Isa::Avx512);
  for (int n : {1, 2, 3, 4, 5, 7, 16, 131})
    for (int rows : {8, 16, 37, 64, 71})
      for (int cols : {64, 192, 512, 2048})
        for (bool precise : {false, true}) {
          std::mt19937 rng(rows * 131 + cols * 7 + n + 1000);
          RandQ4 q(rows, cols, 4, rng);
          std::normal_distribution<float> nd(0.0f, 1.0f);
          std::vector<float> X(static_cast<size_t>(n) * cols);
          for (auto& x : X) x = nd(rng);
          fast::QuantX qx;
          fast::quantize_x_ref(X.data(), n, cols, precise, qx);
          std::vector<float> ref(static_cast<size_t>(n) * rows, NAN), got(ref.size(), NAN), v512(ref.size(), NAN);
          fast::q4_rows_portable(q.m, 0, rows, qx, precise, ref.data());
          fast::q4_rows_avx2(q.m, 0, rows, qx, precise, got.data());
          const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " n=" + std::to_string(n) +
                                   " precise=" + std::to_string(precise);
          EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-6) << what;
          if (avx512) {
            fast::q4_rows_avx512(q.m, 0, rows, qx, precise, v512.data());
            EXPECT_TRUE(same_bits(got, v512)) << what << ": AVX2 differs from AVX-512 (max rel "
                                              << testmetrics::rms_rel_err(got, v512) << ")";
          }
          // row ranges starting inside the matrix: at 16 (a pool task boundary) and at 5 (decode quads)
          for (int r0 : {5, 16}) {
            if (r0 >= rows) continue;
            std::vector<float> part(ref.size(), NAN);
            fast::q4_rows_avx2(q.m, r0, rows, qx, precise, part.data());
            for (int i = 0; i < n; ++i)
              for (int r = r0; r < rows; ++r) {
                const float a = part[static_cast<size_t>(i) * rows + r], b = ref[static_cast<size_t>(i) * rows + r];
                ASSERT_LE(std::fabs(a - b), 1e-5f * (1.0f + std::fabs(b))) << what << " r0=" << r0 << " row " << r;
              }
            for (int i = 0; i < n; ++i)  // rows before r0 untouched
              for (int r = 0; r < r0; ++r) ASSERT_TRUE(std::isnan(part[static_cast<size_t>(i) * rows + r]));
          }
        }
}

// Whole products through the AVX2 tier (activation quantisation + kernel, one job and batches) against the
// f32 reference, at the AVX-512 tier's bounds.
TEST(CpuFastKernels, Avx2TierMatchesReference) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  fast::set_isa_override(fast::Isa::Avx2);
  ASSERT_EQ(fast::active_isa(), fast::Isa::Avx2);
  for (int n : {1, 3, 4, 9, 40})
    for (int cols : {64, 128, 192, 512, 2048}) {
      check_q4(37, cols, n, true, 2e-4, true);
      check_q4(37, cols, n, false, 2e-2, true);
    }
  fast::clear_isa_override();
}

// The AVX2 8-bit / bf16 kernel: within 1e-5 of the reference, bit-identical to the AVX-512 kernel.
TEST(CpuFastKernels, Q8Bf16Avx2MatchesReferenceAndAvx512) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  std::mt19937 rng(21);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  RandQ4 q8(50, 192, 8, rng);
  const int rows = 45, cols = 272;
  std::vector<uint16_t> w(size_t(rows) * cols);
  for (auto& x : w) x = f32_to_bf16(nd(rng) * 0.05f);
  QMatrix bf;
  bf.kind = QMatrix::Kind::Dense;
  bf.dtype = DType::BF16;
  bf.rows = rows;
  bf.cols = cols;
  bf.w = w.data();
  for (const QMatrix* m : {&q8.m, &bf}) {
    ASSERT_TRUE(fast::q8_bf16_supported(*m));
    for (int n : {1, 3}) {
      std::vector<float> X(size_t(n) * m->cols);
      for (auto& x : X) x = nd(rng);
      std::vector<float> ref(size_t(n) * m->rows), got(ref.size(), NAN), v512(ref.size(), NAN);
      ref::matmul(*m, X.data(), n, ref.data());
      fast::q8_bf16_rows_avx2(*m, 0, m->rows, X.data(), n, got.data());
      EXPECT_LE(testmetrics::rms_rel_err(got, ref), 1e-5) << "bits=" << m->bits << " n=" << n;
      if (has_isa(fast::Isa::Avx512)) {
        fast::q8_bf16_rows_avx512(*m, 0, m->rows, X.data(), n, v512.data());
        EXPECT_TRUE(same_bits(got, v512)) << "bits=" << m->bits << " n=" << n;
      }
    }
  }
}

// GDN step / chunk scan and attention on the AVX2 tier: within 1e-5 of the reference, and bit-identical to the
// AVX-512 tier where the CPU has it.
TEST(CpuFastKernels, SeqKernelsAvx2MatchReferenceAndAvx512) {
  if (!has_isa(fast::Isa::Avx2)) GTEST_SKIP() << "no AVX2 + FMA on this CPU";
  const bool avx512 = has_isa(fast::Isa::Avx512);
  std::mt19937 rng(31);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rnd = [&](size_t n, float sc) {
    std::vector<float> v(n);
    for (auto& x : v) x = nd(rng) * sc;
    return v;
  };
  {  // GDN: 9 tokens through the scan, then 2 single steps
    const int Hk = 4, Hv = 8, Dk = 128, Dv = 128, n = 9;
    const size_t xs = 2 * Hk * Dk + Hv * Dv;
    auto x = rnd(n * xs, 0.09f), S0 = rnd(size_t(Hv) * Dv * Dk, 0.1f);
    std::vector<float> g(n * Hv), beta(n * Hv);
    for (int i = 0; i < n * Hv; ++i) {
      g[i] = -0.05f * (1 + i % 7);
      beta[i] = 0.2f + 0.03f * (i % 11);
    }
    auto run = [&](int mode, std::vector<float>& S, std::vector<float>& o) {  // 0 ref, 1 AVX2, 2 AVX-512
      S = S0;
      o.assign(size_t(n + 2) * Hv * Dv, NAN);
      if (mode == 1) fast::set_isa_override(fast::Isa::Avx2);
      if (mode == 0)
        ref::gdn_scan(S.data(), x.data(), x.data() + Hk * Dk, x.data() + 2 * Hk * Dk, xs, g.data(), beta.data(), n,
                      Hk, Hv, Dk, Dv, o.data());
      else
        fast::gdn_scan(S.data(), x.data(), x.data() + Hk * Dk, x.data() + 2 * Hk * Dk, xs, g.data(), beta.data(), n,
                       Hk, Hv, Dk, Dv, o.data());
      for (int t = 0; t < 2; ++t) {
        const float* xt = &x[t * xs];
        float* ot = &o[size_t(n + t) * Hv * Dv];
        if (mode == 0)
          ref::gdn_step(S.data(), xt, xt + Hk * Dk, xt + 2 * Hk * Dk, &g[t * Hv], &beta[t * Hv], Hk, Hv, Dk, Dv, ot);
        else
          fast::gdn_step(S.data(), xt, xt + Hk * Dk, xt + 2 * Hk * Dk, &g[t * Hv], &beta[t * Hv], Hk, Hv, Dk, Dv, ot);
      }
      fast::clear_isa_override();
    };
    std::vector<float> S1, o1, S2, o2, S3, o3;
    run(0, S1, o1);
    run(1, S2, o2);
    EXPECT_LE(testmetrics::rms_rel_err(o2, o1), 1e-5);
    EXPECT_LE(testmetrics::rms_rel_err(S2, S1), 1e-5);
    if (avx512) {
      run(2, S3, o3);
      EXPECT_TRUE(same_bits(o2, o3));
      EXPECT_TRUE(same_bits(S2, S3));
    }
  }
  for (int T : {1, 7, 65, 300, 2000, 40000}) {  // attention, short, split over blocks, long
    const int nq = 16, nkv = 2, hd = 256;
    auto q = rnd(nq * hd, 1.0f), kc = rnd(size_t(T) * nkv * hd, 1.0f), vc = rnd(size_t(T) * nkv * hd, 1.0f);
    std::vector<float> a(nq * hd), b(nq * hd, NAN), c(nq * hd, NAN);
    ref::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, a.data());
    fast::set_isa_override(fast::Isa::Avx2);
    fast::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, b.data());
    fast::clear_isa_override();
    EXPECT_LE(testmetrics::rms_rel_err(b, a), 1e-5) << "T=" << T;
    if (avx512) {
      fast::attention_one(q.data(), kc.data(), vc.data(), T, nq, nkv, hd, c.data());
      EXPECT_TRUE(same_bits(b, c)) << "T=" << T;
    }
  }
}
