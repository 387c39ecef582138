// Batched-prefill kernels against the f32 CPU reference on random inputs (outputs poisoned with NaN first; NaN
// never passes): tensor-core GEMM (dense, add, grouped SiLU*mul) and its simple path, device MoE routing, the GDN
// chunk (two chunks, state carried), chunked attention over the cache (flash and simple). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/prefill/prefill.h"

using namespace lily;

namespace {

using testcuda::Dev;
using testcuda::down;
std::vector<float> from_bf(const std::vector<uint16_t>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = bf16_to_f32(v[i]);
  return o;
}


// Random matrix [rows, cols] in format fmt: host QMatrix + device DMat (E experts back to back when E > 1).
struct Mat {
  std::vector<uint32_t> wq;
  std::vector<uint16_t> w16, s, b;
  std::vector<QMatrix> q;  // per expert
  cuda::DMat d;
  int64_t w_stride = 0, sb_stride = 0;
};
void make(Mat& m, Dev& dev, int rows, int cols, int fmt, int E, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  m.d.rows = rows;
  m.d.cols = cols;
  m.d.fmt = fmt;
  m.q.resize(size_t(E));
  const size_t n = size_t(rows) * cols;
  if (fmt == cuda::kBF16) {
    m.w16.resize(n * E);
    for (auto& v : m.w16) v = f32_to_bf16(u(rng) * 0.1f);
    m.d.row_bytes = cols * 2;
    m.d.w = reinterpret_cast<const uint8_t*>(dev.up(m.w16));
    m.w_stride = int64_t(n) * 2;
    for (int e = 0; e < E; ++e) {
      QMatrix& q = m.q[size_t(e)];
      q.rows = rows; q.cols = cols; q.kind = QMatrix::Kind::Dense; q.dtype = DType::BF16;
      q.w = m.w16.data() + n * e;
    }
    return;
  }
  const int bits = fmt, group = 64;
  const size_t words = n * bits / 32, ng = n / group;
  m.wq.resize(words * E);
  for (auto& v : m.wq) v = uint32_t(rng());
  m.s.resize(ng * E);
  m.b.resize(ng * E);
  std::vector<uint32_t> sb(ng * E);
  for (size_t i = 0; i < ng * E; ++i) {
    m.s[i] = f32_to_bf16(u(rng) * 0.02f);
    m.b[i] = f32_to_bf16(u(rng) * 0.1f);
    sb[i] = uint32_t(m.s[i]) | (uint32_t(m.b[i]) << 16);
  }
  cuda::dmat_set_group(m.d, group);
  m.d.row_bytes = cols * bits / 8;
  m.d.sb_row = cols / group;
  m.d.w = reinterpret_cast<const uint8_t*>(dev.up(m.wq));
  m.d.sb = dev.up(sb);
  m.w_stride = int64_t(words) * 4;
  m.sb_stride = int64_t(ng);
  for (int e = 0; e < E; ++e) {
    QMatrix& q = m.q[size_t(e)];
    q.rows = rows; q.cols = cols; q.kind = QMatrix::Kind::Affine; q.sdtype = DType::BF16;
    q.w = m.wq.data() + words * e; q.scales = m.s.data() + ng * e; q.biases = m.b.data() + ng * e;
    q.bits = bits; q.group = group;
  }
}

// GEMM path under test: the simple reference kernel or one of the tensor-core kernels (cuda::GemmKernel).
constexpr int kPathSimple = 0;
const char* fmt_name(int fmt) { return fmt == cuda::kQ4 ? "q4" : fmt == cuda::kQ8 ? "q8" : "bf16"; }
const char* path_name(int path) { return path == kPathSimple ? "simple" : cuda::gemm_kernel_name(path); }
const auto kPaths = ::testing::Values(kPathSimple, int(cuda::kGemmKernelV2), int(cuda::kGemmKernelWG));
// the wgmma kernel runs only on Hopper with an sm_90a build
bool path_unavailable(int path) { return path == cuda::kGemmKernelWG && !cuda::prefill_gemm_wg_available(); }

// Expert-sorted gathered rows (expert e's i-th row reads A row (37 i + e) % M) and the tile map prefill_route would
// build: ceil(cnt / tile_m) balanced tiles per expert. Returns the row count.
int grouped_rows_and_tiles(const int* cnt, int E, int M, int tile_m, std::vector<int32_t>& rows,
                           std::vector<int32_t>& tiles) {
  int r = 0;
  for (int e = 0; e < E; ++e) {
    for (int i = 0; i < cnt[e]; ++i) rows.push_back(int32_t((i * 37 + e) % M));
    const int nt = (cnt[e] + tile_m - 1) / tile_m;
    for (int i = 0; i < nt; ++i) tiles.insert(tiles.end(), {e, r + i * cnt[e] / nt, r + (i + 1) * cnt[e] / nt});
    r += cnt[e];
  }
  return r;
}

// Grouped (MoE) arguments on base's A operand: rows gathered through `rows`, the tile map `tiles` (+ 2 spare
// tiles past the device count), experts gt / upm (gate / up), output leading dimension ldc; output unset.
cuda::GemmArgs grouped_args(Dev& dev, const cuda::GemmArgs& base, const std::vector<int32_t>& rows,
                            const std::vector<int32_t>& tiles, const Mat& gt, const Mat& upm, int tile_m, int ldc) {
  cuda::GemmArgs q = base;
  const int ntiles = int(tiles.size() / 3);
  q.M = 0;
  q.a_rows = dev.up(rows);
  q.W0 = gt.d;
  q.W1 = upm.d;
  q.w_stride = gt.w_stride;
  q.sb_stride = gt.sb_stride;
  q.tiles = dev.up(tiles);
  q.n_tiles = dev.up(std::vector<int32_t>{ntiles});
  q.max_tiles = ntiles + 2;
  q.tile_m = tile_m;
  q.ldc = ldc;
  return q;
}

class PrefillGemm : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(PrefillGemm, DenseAddAndGroupedSiluMulMatchReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [fmt, path] = GetParam();
  if (path_unavailable(path)) GTEST_SKIP() << "wgmma kernel not available here";
  const bool simple = path == kPathSimple;
  std::mt19937 rng(7 + fmt + simple);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  const int M = 150, N = 200, K = 320;  // 5 k-tiles: the pipelines' prologue and odd tail
  Mat w;
  make(w, dev, N, K, fmt, 1, rng);
  std::vector<float> a(size_t(M) * K), c0(size_t(M) * N);
  std::vector<uint16_t> ab(a.size());
  for (size_t i = 0; i < a.size(); ++i) { ab[i] = f32_to_bf16(u(rng)); a[i] = bf16_to_f32(ab[i]); }
  for (auto& v : c0) v = u(rng);
  std::vector<float> want(c0.size());
  ref::matmul(w.q[0], a.data(), M, want.data());
  cuda::GemmArgs g;
  g.A = dev.up(ab);
  g.lda = K;
  g.M = M;
  g.W0 = w.d;
  g.C = dev.poisoned<float>(c0.size());
  g.ldc = N;
  g.kernel = simple ? 0 : path;
  cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, simple);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got1 = down(g.C, c0.size());
  const double e1 = testmetrics::max_rel_err(got1, want);
  g.rows_first = true;  // the other grid order: the same tiles, the same sums
  g.C = dev.poisoned<float>(c0.size());
  cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, simple);
  CK(cudaDeviceSynchronize());
  EXPECT_EQ(down(g.C, c0.size()), got1);
  g.rows_first = false;
  g.C = dev.up(c0);
  cuda::prefill_gemm(g, cuda::kGemmAdd, nullptr, simple);
  CK(cudaDeviceSynchronize());
  std::vector<float> want2(want);
  for (size_t i = 0; i < want2.size(); ++i) want2[i] += c0[i];
  const double e2 = testmetrics::max_rel_err(down(g.C, c0.size()), want2);
  // a short dense block (M <= 64: the 64-row tile)
  g.M = 40;
  g.C = dev.poisoned<float>(c0.size());
  cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, simple);
  CK(cudaDeviceSynchronize());
  const double e1s = testmetrics::max_rel_err(down(g.C, size_t(40) * N),
                                              std::vector<float>(want.begin(), want.begin() + 40 * N));
  EXPECT_LT(e1s, (simple || fmt == cuda::kBF16) ? 1e-4 : 1e-2);
  // grouped: 4 experts, rows gathered from A, tile map built here (balanced tiles of <= tile_m rows, as
  // prefill_route makes them), for both tile heights
  const int E = 4, I = 96;
  Mat gt, upm;
  make(gt, dev, I, K, fmt, E, rng);
  make(upm, dev, I, K, fmt, E, rng);
  const int cnt[E] = {70, 0, 45, 300};
  for (const int tile_m : {cuda::kGemmTileM, cuda::kGemmTileMBig}) {
    std::vector<int32_t> rows, tiles;
    const int R = grouped_rows_and_tiles(cnt, E, M, tile_m, rows, tiles);
    cuda::GemmArgs q = grouped_args(dev, g, rows, tiles, gt, upm, tile_m, I);
    q.Cb = dev.poisoned<uint16_t>(size_t(R) * I);
    cuda::prefill_gemm(q, cuda::kGemmSiluMul, nullptr, simple);
    CK(cudaDeviceSynchronize());
    uint16_t* first = q.Cb;
    q.rows_first = true;  // the grouped tiles in the other grid order
    q.Cb = dev.poisoned<uint16_t>(size_t(R) * I);
    cuda::prefill_gemm(q, cuda::kGemmSiluMul, nullptr, simple);
    CK(cudaDeviceSynchronize());
    EXPECT_EQ(down(q.Cb, size_t(R) * I), down(first, size_t(R) * I));
    std::vector<float> want3(size_t(R) * I), gv(I), uv(I);
    int r = 0;
    for (int e = 0; e < E; ++e)
      for (int i = 0; i < cnt[e]; ++i, ++r) {
        ref::matvec(gt.q[size_t(e)], &a[size_t(rows[size_t(r)]) * K], gv.data());
        ref::matvec(upm.q[size_t(e)], &a[size_t(rows[size_t(r)]) * K], uv.data());
        for (int j = 0; j < I; ++j) want3[size_t(r) * I + j] = ref::silu(gv[size_t(j)]) * uv[size_t(j)];
      }
    const double e3 = testmetrics::max_rel_err(from_bf(down(q.Cb, want3.size())), want3);
    std::printf("[ prefill gemm fmt %d %s tile %d ] store %.2e add %.2e short %.2e grouped silu*mul %.2e\n", fmt,
                path_name(path), tile_m, e1, e2, e1s, e3);
    const double tol = (simple || fmt == cuda::kBF16) ? 1e-4 : 1e-2;  // mma path rounds dequantised weights to bf16
    EXPECT_LT(e1, tol);
    EXPECT_LT(e2, tol);
    EXPECT_LT(e3, 1e-2);  // bf16 output
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, PrefillGemm,
                         ::testing::Combine(::testing::Values(int(cuda::kQ4), int(cuda::kQ8), int(cuda::kBF16)),
                                            kPaths),
                         [](const auto& info) {
                           return std::string(fmt_name(std::get<0>(info.param))) + "_" +
                                  path_name(std::get<1>(info.param));
                         });

// fp16 / split operand paths (prefill.h PrefillPrec). A rows span 1e-6 .. 1e6 (beyond fp16 range: the row scale
// must keep them finite and precise), one row is zero. Checks:
//  - vs a CPU reference with the inputs rounded the way the mode rounds them (A: fp16 of A / rowscale, or exact
//    for split; W: fp16 of the f32 dequantised value on the mma path): only f32 summation order differs, < 2e-4;
//  - vs the exact f32 reference, per row relative to the row's max |y|: every product carries at most the unit
//    roundoff of each rounded operand (2^-11 each), so the error is ~2^-11 * sqrt(sum (aw)^2) << 2^-10 * max|y|:
//    bound 2e-3 (= 2^-9; a CPU simulation of these shapes gives 5e-4 .. 7e-4) where an fp16 operand is rounded
//    (fp16 A, or quantised W on the mma path), 2e-5 where nothing is (split A with bf16 weights, which fp16
//    holds exactly, or split A on the f32-dequant simple path). The bf16 mode's bound is 1e-2.
// The grouped SiLU*mul (f32 output, gathered rows, row scales through the gather) gets twice those bounds.
float round_f16(float x) {  // to the nearest fp16 value (ties to even), saturating at 65504
  if (!(std::fabs(x) >= 6.103515625e-05f)) return std::nearbyint(x * 16777216.f) / 16777216.f;
  int e = 0;
  const float m = std::frexp(x, &e);
  return std::clamp(std::ldexp(std::nearbyint(std::ldexp(m, 11)), e - 11), -65504.f, 65504.f);
}
double row_err(const std::vector<float>& got, const std::vector<double>& want, int rows, int cols) {
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    double mx = 0, mw = 0;
    for (int c = 0; c < cols; ++c) {
      const size_t i = size_t(r) * cols + c;
      if (!std::isfinite(got[i])) return INFINITY;
      mx = std::max(mx, std::fabs(got[i] - want[i]));
      mw = std::max(mw, std::fabs(want[i]));
    }
    if (mw > 0) worst = std::max(worst, mx / mw);
    else worst = std::max(worst, mx);
  }
  return worst;
}

class PrefillGemmPrec : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(PrefillGemmPrec, FineOperandsMatchReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [fmt, prec, path] = GetParam();
  if (path_unavailable(path)) GTEST_SKIP() << "wgmma kernel not available here";
  const bool simple = path == kPathSimple;
  std::mt19937 rng(11 + fmt + 3 * prec + simple);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  const int M = 150, N = 200, K = 320;  // 5 k-tiles: the pipelines' prologue and odd tail
  Mat w;
  make(w, dev, N, K, fmt, 1, rng);
  std::vector<float> a(size_t(M) * K);
  for (int r = 0; r < M; ++r) {
    const float mag = r == 3 ? 0.f : r % 7 == 0 ? 1e6f : r % 7 == 1 ? 1e-6f : std::ldexp(1.f, r % 11 - 5);
    for (int k = 0; k < K; ++k) a[size_t(r) * K + k] = u(rng) * mag;
  }
  cuda::ActRows ar;
  ar.hi = dev.poisoned<uint16_t>(a.size());
  ar.scale = dev.poisoned<float>(size_t(M));
  if (prec == cuda::kPrecSplit) ar.lo = dev.poisoned<uint16_t>(a.size());
  cuda::prefill_quant_rows(dev.up(a), K, M, K, prec, ar, nullptr);
  // host copies of the operands as the mode rounds them
  std::vector<double> wd(size_t(N) * K), wr(wd.size()), ad(a.size()), arr(a.size());
  {
    std::vector<float> ek(size_t(K), 0.f), col(static_cast<size_t>(N));
    for (int k = 0; k < K; ++k) {
      ek[size_t(k)] = 1.f;
      ref::matvec(w.q[0], ek.data(), col.data());
      ek[size_t(k)] = 0.f;
      for (int n = 0; n < N; ++n) {
        wd[size_t(n) * K + k] = col[size_t(n)];
        wr[size_t(n) * K + k] = simple ? col[size_t(n)] : round_f16(col[size_t(n)]);
      }
    }
  }
  for (int r = 0; r < M; ++r) {
    float mx = 0.f;
    for (int k = 0; k < K; ++k) mx = std::max(mx, std::fabs(a[size_t(r) * K + k]));
    int e = 0;
    if (mx > 0.f) std::frexp(mx, &e);
    const float sc = std::ldexp(1.f, e - 15);
    for (int k = 0; k < K; ++k) {
      const size_t i = size_t(r) * K + k;
      ad[i] = a[i];
      arr[i] = prec == cuda::kPrecSplit ? double(a[i]) : double(round_f16(a[i] / sc)) * sc;
    }
  }
  auto mm = [&](const std::vector<double>& A, const std::vector<double>& W) {
    std::vector<double> y(size_t(M) * N);
    for (int r = 0; r < M; ++r)
      for (int n = 0; n < N; ++n) {
        double acc = 0;
        for (int k = 0; k < K; ++k) acc += A[size_t(r) * K + k] * W[size_t(n) * K + k];
        y[size_t(r) * N + n] = acc;
      }
    return y;
  };
  const std::vector<double> y_exact = mm(ad, wd), y_round = mm(arr, wr);
  cuda::GemmArgs g;
  g.A = ar.hi;
  g.A_lo = ar.lo;
  g.a_scale = ar.scale;
  g.prec = prec;
  g.lda = K;
  g.M = M;
  g.W0 = w.d;
  g.C = dev.poisoned<float>(size_t(M) * N);
  g.ldc = N;
  g.kernel = simple ? 0 : path;
  cuda::prefill_gemm(g, cuda::kGemmStore, nullptr, simple);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = down(g.C, size_t(M) * N);
  const double e_round = row_err(got, y_round, M, N), e_exact = row_err(got, y_exact, M, N);
  const bool w_rounded = !simple && fmt != cuda::kBF16;
  const double tol = (prec == cuda::kPrecFP16 || w_rounded) ? 2e-3 : 2e-5;
  // grouped SiLU*mul over gathered rows, f32 output
  const int I = 96, R = 100;
  Mat gt, upm;
  make(gt, dev, I, K, fmt, 1, rng);
  make(upm, dev, I, K, fmt, 1, rng);
  std::vector<int32_t> rows(static_cast<size_t>(R));
  for (int i = 0; i < R; ++i) rows[size_t(i)] = int32_t((i * 37 + 5) % M);
  std::vector<double> want3(size_t(R) * I);
  std::vector<float> gv(static_cast<size_t>(I)), uv(static_cast<size_t>(I));
  for (int i = 0; i < R; ++i) {
    ref::matvec(gt.q[0], &a[size_t(rows[size_t(i)]) * K], gv.data());
    ref::matvec(upm.q[0], &a[size_t(rows[size_t(i)]) * K], uv.data());
    for (int j = 0; j < I; ++j) want3[size_t(i) * I + j] = double(ref::silu(gv[size_t(j)])) * uv[size_t(j)];
  }
  double e3 = 0;
  for (const int tile_m : {cuda::kGemmTileM, cuda::kGemmTileMBig}) {  // two 64-row tiles, one 128-row tile
    const std::vector<int32_t> tiles = tile_m == cuda::kGemmTileM ? std::vector<int32_t>{0, 0, 64, 0, 64, R}
                                                                  : std::vector<int32_t>{0, 0, R};
    cuda::GemmArgs q = g;
    q.M = 0;
    q.a_rows = dev.up(rows);
    q.W0 = gt.d;
    q.W1 = upm.d;
    q.tiles = dev.up(tiles);
    q.n_tiles = dev.up(std::vector<int32_t>{int32_t(tiles.size() / 3)});
    q.max_tiles = 3;
    q.tile_m = tile_m;
    q.C = dev.poisoned<float>(size_t(R) * I);
    q.ldc = I;
    cuda::prefill_gemm(q, cuda::kGemmSiluMul, nullptr, simple);
    CK(cudaDeviceSynchronize());
    e3 = std::max(e3, row_err(down(q.C, want3.size()), want3, R, I));
  }
  std::printf("[ prefill gemm %s fmt %d %s ] vs rounded-input ref %.2e, vs exact %.2e (tol %.0e), silu*mul %.2e\n",
              cuda::prefill_prec_name(prec), fmt, path_name(path), e_round, e_exact, tol, e3);
  EXPECT_LT(e_round, 2e-4);
  EXPECT_LT(e_exact, tol);
  EXPECT_LT(e3, 2 * tol + 1e-5);  // + f32 silu (expf) vs the reference's
}

INSTANTIATE_TEST_SUITE_P(Formats, PrefillGemmPrec,
                         ::testing::Combine(::testing::Values(int(cuda::kQ4), int(cuda::kQ8), int(cuda::kBF16)),
                                            ::testing::Values(int(cuda::kPrecFP16), int(cuda::kPrecSplit)),
                                            kPaths),
                         [](const auto& info) {
                           return std::string(fmt_name(std::get<0>(info.param))) + "_" +
                                  cuda::prefill_prec_name(std::get<1>(info.param)) + "_" +
                                  path_name(std::get<2>(info.param));
                         });

TEST(PrefillPrec, ParsesEnvValues) {
  EXPECT_EQ(cuda::parse_prefill_prec("bf16"), cuda::kPrecBF16);
  EXPECT_EQ(cuda::parse_prefill_prec("fp16"), cuda::kPrecFP16);
  EXPECT_EQ(cuda::parse_prefill_prec("split"), cuda::kPrecSplit);
  EXPECT_EQ(cuda::parse_prefill_prec("mixed"), cuda::kPrecMixed);
  EXPECT_STREQ(cuda::prefill_prec_name(cuda::kPrecMixed), "mixed");
  EXPECT_THROW(cuda::parse_prefill_prec("f16"), Error);
  EXPECT_THROW(cuda::parse_prefill_prec(""), Error);
}

// Mean time of `reps` launches of g (after one warm-up), in ms.
double time_gemm(const cuda::GemmArgs& g, int mode, int reps) {
  cuda::prefill_gemm(g, mode, nullptr);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  cudaEventRecord(e0);
  for (int i = 0; i < reps; ++i) cuda::prefill_gemm(g, mode, nullptr);
  cudaEventRecord(e1);
  cudaEventSynchronize(e1);
  float ms = 0;
  cudaEventElapsedTime(&ms, e0, e1);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms / reps;
}

// Rate of the tensor-core GEMMs, v2 and wg (where available), per operand precision (printed; the bench reports the end-to-end
// rate): a 4096 x 8192 x 2048 Q4 dense store, and the MoE gate+up of a 4096-token chunk (256 experts x ~128 rows,
// I = 512 gate + 512 up rows, K = 2048, rows gathered, 128-row tiles, bf16 output; FLOPs counted once).
TEST(PrefillGemmSpeed, Q4LargeTiles) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(9);
  Dev dev;
  const int M = 4096, N = 8192, K = 2048;
  Mat w;
  make(w, dev, N, K, cuda::kQ4, 1, rng);
  const uint16_t* a_bf = dev.up(std::vector<uint16_t>(size_t(M) * K, f32_to_bf16(0.01f)));
  const uint16_t* a_h = dev.up(std::vector<uint16_t>(size_t(M) * K, uint16_t(0x211F)));  // fp16 0.01
  const uint16_t* a_lo = dev.up(std::vector<uint16_t>(size_t(M) * K, uint16_t(0)));
  const float* sc = dev.up(std::vector<float>(size_t(M), 1.f));
  // MoE: expert e gets 128 + ((37 e) % 65) - 32 rows (96 .. 160, ~32768 in all), rows gathered from the M tokens
  const int E = 256, I = 512;
  Mat gt, upm;
  make(gt, dev, I, K, cuda::kQ4, E, rng);
  make(upm, dev, I, K, cuda::kQ4, E, rng);
  std::vector<int32_t> rows, tiles;
  for (int e = 0, r = 0; e < E; ++e) {
    const int c = 128 + (37 * e) % 65 - 32, nt = (c + cuda::kGemmTileMBig - 1) / cuda::kGemmTileMBig;
    for (int i = 0; i < c; ++i) rows.push_back(int32_t((int64_t(i) * 977 + e * 131) % M));
    for (int i = 0; i < nt; ++i) tiles.insert(tiles.end(), {e, r + i * c / nt, r + (i + 1) * c / nt});
    r += c;
  }
  const int R = int(rows.size());
  const std::vector<int32_t> ntv = {int32_t(tiles.size() / 3)};
  const int32_t* d_rows = dev.up(rows);
  const int32_t* d_tiles = dev.up(tiles);
  const int32_t* d_nt = dev.up(ntv);
  uint16_t* moe_out = dev.poisoned<uint16_t>(size_t(R) * I);
  for (int prec : {int(cuda::kPrecBF16), int(cuda::kPrecFP16), int(cuda::kPrecSplit)}) {
    cuda::GemmArgs g;
    g.A = prec == cuda::kPrecBF16 ? a_bf : a_h;
    g.A_lo = prec == cuda::kPrecSplit ? a_lo : nullptr;
    g.a_scale = prec == cuda::kPrecBF16 ? nullptr : sc;
    g.prec = prec;
    g.lda = K;
    g.M = M;
    g.W0 = w.d;
    g.C = dev.poisoned<float>(size_t(M) * N);
    g.ldc = N;
    cuda::GemmArgs q = g;
    q.M = 0;
    q.C = nullptr;
    q.Cb = moe_out;
    q.ldc = I;
    q.a_rows = d_rows;
    q.W0 = gt.d;
    q.W1 = upm.d;
    q.w_stride = gt.w_stride;
    q.sb_stride = gt.sb_stride;
    q.tiles = d_tiles;
    q.n_tiles = d_nt;
    q.max_tiles = ntv[0];
    q.tile_m = cuda::kGemmTileMBig;
    for (int kernel : {int(cuda::kGemmKernelV2), int(cuda::kGemmKernelWG)}) {
      if (path_unavailable(kernel)) continue;
      g.kernel = q.kernel = kernel;
      const double ms = time_gemm(g, cuda::kGemmStore, 10);
      const double ms_moe = time_gemm(q, cuda::kGemmSiluMul, 10);
      CK(cudaDeviceSynchronize());
      std::printf("[ prefill gemm speed %s %s ] %dx%dx%d Q4: %.3f ms, %.1f TFLOP/s | MoE gate+up %d rows x %d x %d "
                  "(x2): %.3f ms, %.1f TFLOP/s\n",
                  cuda::prefill_prec_name(prec), cuda::gemm_kernel_name(kernel), M, N, K, ms,
                  2.0 * M * N * K / (ms * 1e-3) / 1e12, R, I, K, ms_moe, 4.0 * R * I * K / (ms_moe * 1e-3) / 1e12);
      for (float v : down(g.C, 1000)) EXPECT_TRUE(std::isfinite(v));
      for (uint16_t v : down(moe_out, 1000)) EXPECT_TRUE(std::isfinite(bf16_to_f32(v)));
    }
  }
}

// Routing arguments over n tokens' logits lg [n][E], every output buffer poisoned.
cuda::RouteArgs route_args(Dev& dev, const std::vector<float>& lg, int n, int E, int k, int tile_m) {
  cuda::RouteArgs ra;
  ra.logits = dev.up(lg);
  ra.n = n; ra.E = E; ra.k = k;
  ra.idx = dev.poisoned<int32_t>(size_t(n) * k);
  ra.w = dev.poisoned<float>(size_t(n) * k);
  ra.counts = dev.poisoned<int32_t>(E);
  ra.fill = dev.poisoned<int32_t>(E);
  ra.max_tiles = (n * k + cuda::kGemmTileM - 1) / cuda::kGemmTileM + E;
  ra.tile_m = tile_m;
  ra.tiles = dev.poisoned<int32_t>(size_t(ra.max_tiles) * 3);
  ra.n_tiles = dev.poisoned<int32_t>(1);
  ra.row_token = dev.poisoned<int32_t>(size_t(n) * k);
  ra.slot_row = dev.poisoned<int32_t>(size_t(n) * k);
  return ra;
}

class PrefillRoute : public ::testing::TestWithParam<int> {};

// Routing + tile map at both tile heights; experts 0..3 favoured so that they get > 128 rows (several tiles each).
TEST_P(PrefillRoute, TopkHistogramScanScatter) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int tile_m = GetParam();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 2.f);
  const int n = 301, E = 256, k = 8;
  std::vector<float> lg(size_t(n) * E);
  for (size_t i = 0; i < lg.size(); ++i) lg[i] = nd(rng) + (i % E < 4 ? 4.f : 0.f);
  Dev dev;
  cuda::RouteArgs ra = route_args(dev, lg, n, E, k, tile_m);
  cuda::prefill_route(ra, nullptr);
  CK(cudaDeviceSynchronize());
  auto idx = down(ra.idx, size_t(n) * k);
  auto w = down(ra.w, size_t(n) * k);
  auto tok = down(ra.row_token, size_t(n) * k);
  auto slot = down(ra.slot_row, size_t(n) * k);
  const int nt = down(ra.n_tiles, 1)[0];
  auto tiles = down(ra.tiles, size_t(nt) * 3);
  int bad = 0;
  std::vector<int> ri(k);
  std::vector<float> rw(k);
  for (int t = 0; t < n; ++t) {
    ref::route_topk(&lg[size_t(t) * E], E, k, ri.data(), rw.data());
    for (int j = 0; j < k; ++j) {
      const size_t i = size_t(t) * k + j;
      bad += idx[i] != ri[size_t(j)] || std::fabs(w[i] - rw[size_t(j)]) > 1e-5f || tok[size_t(slot[i])] != t;
    }
  }
  EXPECT_EQ(bad, 0);
  // tiles cover rows [0, n*k) in order, each within one expert whose rows they are; an expert's c rows make
  // ceil(c / tile_m) tiles whose sizes differ by at most 1
  int covered = 0, multi = 0;
  std::vector<int> ntile(E, 0), tmin(E, 1 << 30), tmax(E, 0), rows_of(E, 0);
  for (int i = 0; i < nt; ++i) {
    const int e = tiles[size_t(3 * i)], sz = tiles[size_t(3 * i + 2)] - tiles[size_t(3 * i + 1)];
    ++ntile[size_t(e)];
    rows_of[size_t(e)] += sz;
    tmin[size_t(e)] = std::min(tmin[size_t(e)], sz);
    tmax[size_t(e)] = std::max(tmax[size_t(e)], sz);
  }
  for (int e = 0; e < E; ++e) {
    if (!ntile[size_t(e)]) continue;
    EXPECT_EQ(ntile[size_t(e)], (rows_of[size_t(e)] + tile_m - 1) / tile_m) << "expert " << e;
    EXPECT_LE(tmax[size_t(e)] - tmin[size_t(e)], 1) << "expert " << e;
    multi += ntile[size_t(e)] > 1;
  }
  EXPECT_GE(multi, 4);  // the favoured experts
  for (int i = 0; i < nt; ++i) {
    EXPECT_EQ(tiles[size_t(3 * i + 1)], covered);
    EXPECT_GT(tiles[size_t(3 * i + 2)], covered);
    EXPECT_LE(tiles[size_t(3 * i + 2)] - covered, tile_m);
    for (int r = tiles[size_t(3 * i + 1)]; r < tiles[size_t(3 * i + 2)]; ++r) {
      const int t = tok[size_t(r)];
      bool found = false;
      for (int j = 0; j < k; ++j) found |= slot[size_t(t) * k + j] == r && idx[size_t(t) * k + j] == tiles[size_t(3 * i)];
      EXPECT_TRUE(found);
    }
    covered = tiles[size_t(3 * i + 2)];
  }
  EXPECT_EQ(covered, n * k);
}

// Broken router logits (NaN, all -inf, all equal) still give k distinct experts < E per token (NaN ranks as -inf,
// ties go to the lower index) and a tile map over exactly n * k rows: nothing downstream indexes out of range.
TEST(PrefillRouteRobust, NanAndTiedLogitsGiveDistinctExperts) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int n = 4, E = 256, k = 8;
  std::vector<float> lg(size_t(n) * E, 0.f);
  for (int e = 0; e < E; ++e) {
    lg[size_t(e)] = NAN;                                    // token 0: all NaN
    lg[size_t(E + e)] = -INFINITY;                          // token 1: all -inf
    lg[size_t(2 * E + e)] = 1.f;                            // token 2: all equal
    lg[size_t(3 * E + e)] = e % 3 == 0 ? NAN : float(e);    // token 3: NaN among finite logits
  }
  Dev dev;
  cuda::RouteArgs ra = route_args(dev, lg, n, E, k, cuda::kGemmTileM);
  cuda::prefill_route(ra, nullptr);
  CK(cudaDeviceSynchronize());
  auto idx = down(ra.idx, size_t(n) * k);
  for (int t = 0; t < n; ++t) {
    std::vector<int> seen;
    for (int j = 0; j < k; ++j) {
      const int e = idx[size_t(t * k + j)];
      EXPECT_TRUE(e >= 0 && e < E) << "token " << t << " choice " << j << ": " << e;
      EXPECT_EQ(std::count(seen.begin(), seen.end(), e), 0) << "token " << t << " repeats expert " << e;
      seen.push_back(e);
    }
  }
  for (int j = 0; j < k; ++j) EXPECT_EQ(idx[size_t(2 * k + j)], j);  // ties -> lowest indices
  EXPECT_EQ(idx[size_t(3 * k)], 254);                                // largest finite logit (255 is NaN)
  const int nt = down(ra.n_tiles, 1)[0];
  auto tiles = down(ra.tiles, size_t(nt) * 3);
  EXPECT_EQ(tiles[size_t(3 * (nt - 1) + 2)], n * k);
}

INSTANTIATE_TEST_SUITE_P(TileRows, PrefillRoute, ::testing::Values(cuda::kGemmTileM, cuda::kGemmTileMBig));

}  // namespace

#endif  // LILY_HAVE_CUDA
