// The GDN prefill paths against the token-by-token CPU reference on random inputs: two calls (state and conv ring
// carried), partial chunks, Dv not a multiple of the 32-row slice, weak and strong decay. Outputs (f32 y, obuf,
// cbuf) are poisoned with NaN first; NaN never passes. The tensor-core chunked kernels (GdnChunkArgs::chunked) with
// a tf32 bound; the sequential scan kernels (plain, the reference, and wide: GdnChunkArgs::scan) at more shapes (Dk
// 32..128, Dv not a multiple of 16, one-token chunks). Plus a timing print of the paths and scan kernels at the
// full model's head sizes (n up to 4096). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_test_buffers.h"
#include "gdn_token_reference.h"
#include "test_metrics.h"
#include "core/error.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/prefill/prefill.h"

using namespace lily;

namespace {

using testcuda::Dev;
using testcuda::down;

struct Case {
  int Hk, Hv, Dk, Dv, n1, n2;
  float decay;  // a_neg magnitude: 1 -> g in about [-2, 0]; 30 -> down to about -60
};

struct Problem {
  int Hk, Hv, Dk, Dv, K = 4, n, kd, vd, cd, P;
  std::vector<float> proj, cw, dtb, an, nw;
};
Problem make_problem(const Case& cs, unsigned seed) {
  Problem p;
  p.Hk = cs.Hk; p.Hv = cs.Hv; p.Dk = cs.Dk; p.Dv = cs.Dv; p.n = cs.n1 + cs.n2;
  p.kd = p.Hk * p.Dk; p.vd = p.Hv * p.Dv; p.cd = 2 * p.kd + p.vd; p.P = p.cd + p.vd + 2 * p.Hv;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  p.proj.resize(size_t(p.n) * p.P);
  p.cw.resize(size_t(p.cd) * p.K);
  p.dtb.resize(size_t(p.Hv));
  p.an.resize(size_t(p.Hv));
  p.nw.resize(size_t(p.Dv));
  for (auto& v : p.proj) v = u(rng);
  for (auto& v : p.cw) v = u(rng) * 0.5f;
  for (auto& v : p.dtb) v = u(rng);
  for (auto& v : p.an) v = -std::fabs(u(rng)) * cs.decay;
  for (auto& v : p.nw) v = 1.f + 0.3f * u(rng);
  return p;
}

// token-by-token CPU reference: f32 y [n][vd] and the final state
void reference(const Problem& p, std::vector<float>& want, std::vector<float>& S) {
  testgdn::token_reference(p.proj.data(), p.P, p.n, p.cw.data(), p.dtb.data(), p.an.data(), p.nw.data(), p.Hk, p.Hv,
                           p.Dk, p.Dv, p.K, want, S);
}

// runs prefill_gdn over the problem in two calls (n1, n2); returns f32 y and the final state. took: both calls
// took the chunked path iff chunked, and the sequential ones the scan kernel `scan` (< 0: the default, wide).
void run_gpu(const Problem& p, int n1, bool chunked, std::vector<float>& y, std::vector<float>& S, bool& took,
             int scan = -1) {
  Dev dev;
  const int n = p.n, cd = p.cd, vd = p.vd;
  float* dproj = dev.up(p.proj);
  cuda::GdnChunkArgs a;
  a.ldp = p.P;
  a.Hk = p.Hk; a.Hv = p.Hv; a.Dk = p.Dk; a.Dv = p.Dv; a.K = p.K;
  a.conv_w = dev.up(p.cw); a.dt_bias = dev.up(p.dtb); a.a_neg = dev.up(p.an); a.norm_w = dev.up(p.nw);
  a.ring = dev.up(std::vector<float>(size_t(p.K) * cd, 0.f));
  a.S = dev.up(std::vector<float>(size_t(p.Hv) * p.Dv * p.Dk, 0.f));
  a.cbuf = dev.up(std::vector<float>(size_t(n) * cd, NAN));
  a.obuf = dev.up(std::vector<float>(size_t(n) * vd, NAN));
  a.chunked = chunked;
  a.scan = scan;
  a.ws = dev.up(std::vector<float>(cuda::prefill_gdn_ws_floats(n, p.Hv, p.Dk, p.Dv), NAN));
  float* dy = dev.up(std::vector<float>(size_t(n) * vd, NAN));
  took = true;
  auto check_path = [&] {
    const bool c = cuda::prefill_gdn_uses_chunked(a);
    took = took && c == chunked && (c || scan < 0 || cuda::prefill_gdn_scan_kernel(a) == scan);
  };
  a.proj = dproj; a.n = n1; a.pos0 = 0; a.y_f = dy;
  check_path();
  cuda::prefill_gdn(a, nullptr);
  a.proj = dproj + size_t(n1) * p.P; a.n = n - n1; a.pos0 = n1; a.y_f = dy + size_t(n1) * vd;
  check_path();
  cuda::prefill_gdn(a, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  y = down(dy, size_t(n) * vd);
  S = down(a.S, size_t(p.Hv) * p.Dv * p.Dk);
}

// The tensor-core chunked kernels (k_prep_tc + k_cscan_tc, GdnChunkArgs::chunked) against the token-by-token
// reference: weak and strong decay, Dk 32 / 64 / 128, Dv 32..128 incl. 48, partial chunks, plus Dk 96 with Dv 40 (an 8-row value slice) and the real heads
// with strong decay. Bound 2e-3, derived from the kernels' arithmetic (not fitted). A single tf32 product rounds
// both operands to 10 explicit mantissa bits (u = 2^-11 each; fp16-stored operands carry the same u), so it is
// off by at most 2u sum|a_i b_i|, about 2u of the result's scale for these normalised q, k. The products whose
// results cancel (K K^T, Q K^T, T [K | V] -> W, U and W M^T) run as 3xTF32 (~2^-21, negligible), so D = U - W M^T
// is f32-accurate and the remaining single-tf32 steps are (Q eg) M^T and P D (o: 2u; P's fp16 storage and D's
// tf32 rounding are the two operand roundings of P D) and D^T (K ed) (the state update: 2u). An output sees at
// most two of them in a row (the update that built M, then (Q eg) M^T), so 4u = 2^-9 = 1.95e-3 of the output
// scale; max_rel_err divides by the largest |want|, so this is conservative, and rounding errors of random sign
// add like a random walk, so the measured error sits well below (H200: y, S max ~5e-4). The state S gets the
// same bound. (The sequential f32 scan's 1e-4 cannot hold: one tf32 rounding alone is 4.9e-4.)
class PrefillGdnChunkedTc : public ::testing::TestWithParam<Case> {};

TEST_P(PrefillGdnChunkedTc, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Case cs = GetParam();
  const Problem p = make_problem(cs, unsigned(cs.n1 * 7 + cs.n2 + cs.Dv));
  std::vector<float> want, Sw, y, S;
  reference(p, want, Sw);
  bool took = false;
  run_gpu(p, cs.n1, true, y, S, took);
  ASSERT_TRUE(took) << "the tensor-core chunked path was not taken";
  const double ey = testmetrics::max_rel_err(y, want), es = testmetrics::max_rel_err(S, Sw);
  const double ry = testmetrics::rms_rel_err(y, want), rs = testmetrics::rms_rel_err(S, Sw);
  std::printf("[ gdn chunked tc ] Hv %d Dk %d Dv %d n %d+%d decay %.0f: y max %.2e rms %.2e | S max %.2e rms %.2e\n",
              cs.Hv, cs.Dk, cs.Dv, cs.n1, cs.n2, cs.decay, ey, ry, es, rs);
  EXPECT_LT(ey, 2e-3);
  EXPECT_LT(es, 2e-3);
}

INSTANTIATE_TEST_SUITE_P(Shapes, PrefillGdnChunkedTc,
                         ::testing::Values(Case{2, 4, 64, 32, 40, 150, 1.f}, Case{2, 4, 128, 128, 100, 200, 30.f},
                                           Case{1, 2, 128, 48, 64, 129, 1.f}, Case{2, 4, 32, 64, 33, 64, 30.f},
                                           Case{16, 32, 128, 128, 130, 190, 1.f}, Case{1, 3, 96, 40, 45, 77, 1.f},
                                           Case{16, 32, 128, 128, 64, 300, 30.f}));


// Each sequential scan kernel against the token-by-token reference (f32 throughout: bound 1e-4).
// Shapes: the chunked cases (Dk 32 / 64 / 128, Dv 32..128 incl. 48, strong decay, the real 32 heads x 128 x 128)
// plus Dk 96 with Dv 40 (a partial 16-row block of k_scan_wide, a partial 32-row block of k_scan) and n1 5, and
// Dk 32 with Dv 24 and a one-token first chunk; n2 never a multiple of the 32-token batch.
class PrefillGdnScan : public ::testing::TestWithParam<std::tuple<Case, int>> {};

TEST_P(PrefillGdnScan, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [cs, scan] = GetParam();
  const Problem p = make_problem(cs, unsigned(cs.n1 * 7 + cs.n2 + cs.Dv));
  std::vector<float> want, Sw, y, S;
  reference(p, want, Sw);
  bool took = false;
  run_gpu(p, cs.n1, false, y, S, took, scan);
  ASSERT_TRUE(took) << "the " << cuda::gdn_scan_name(scan) << " scan kernel was not taken";
  const double ey = testmetrics::max_rel_err(y, want), es = testmetrics::max_rel_err(S, Sw);
  std::printf("[ gdn scan %s ] Hv %d Dk %d Dv %d n %d+%d decay %.0f: y %.2e S %.2e\n", cuda::gdn_scan_name(scan),
              cs.Hv, cs.Dk, cs.Dv, cs.n1, cs.n2, cs.decay, ey, es);
  EXPECT_LT(ey, 1e-4);
  EXPECT_LT(es, 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, PrefillGdnScan,
    ::testing::Combine(::testing::Values(Case{2, 4, 64, 32, 40, 150, 1.f}, Case{2, 4, 128, 128, 100, 200, 30.f},
                                         Case{1, 2, 128, 48, 64, 129, 1.f}, Case{2, 4, 32, 64, 33, 64, 30.f},
                                         Case{16, 32, 128, 128, 130, 190, 1.f}, Case{1, 3, 96, 40, 5, 77, 1.f},
                                         Case{2, 2, 32, 24, 1, 33, 30.f}),
                       ::testing::Values(cuda::kGdnScanPlain, cuda::kGdnScanWide)),
    [](const ::testing::TestParamInfo<std::tuple<Case, int>>& i) {  // e.g. Hv32_Dk128_Dv128_n130_190_wide
      const Case& c = std::get<0>(i.param);
      return "Hv" + std::to_string(c.Hv) + "_Dk" + std::to_string(c.Dk) + "_Dv" + std::to_string(c.Dv) + "_n" +
             std::to_string(c.n1) + "_" + std::to_string(c.n2) + "_" + cuda::gdn_scan_name(std::get<1>(i.param));
    });

TEST(PrefillGdnChunkedSpeed, FullHeadsSequentialVsChunked) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int Hk = 16, Hv = 32, Dk = 128, Dv = 128, K = 4, kd = Hk * Dk, vd = Hv * Dv, cd = 2 * kd + vd;
  const int P = cd + vd + 2 * Hv, nmax = 4096;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> proj(size_t(nmax) * P), cw(size_t(cd) * K), dtb(Hv), an(Hv), nw(Dv);
  for (auto& v : proj) v = u(rng);
  for (auto& v : cw) v = u(rng) * 0.5f;
  for (auto& v : dtb) v = u(rng);
  for (auto& v : an) v = -std::fabs(u(rng));
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  Dev dev;
  cuda::GdnChunkArgs a;
  a.proj = dev.up(proj);
  a.ldp = P;
  a.Hk = Hk; a.Hv = Hv; a.Dk = Dk; a.Dv = Dv; a.K = K;
  a.conv_w = dev.up(cw); a.dt_bias = dev.up(dtb); a.a_neg = dev.up(an); a.norm_w = dev.up(nw);
  a.ring = dev.up(std::vector<float>(size_t(K) * cd, 0.f));
  a.S = dev.up(std::vector<float>(size_t(Hv) * Dv * Dk, 0.f));
  a.cbuf = dev.up(std::vector<float>(size_t(nmax) * cd, 0.f));
  a.obuf = dev.up(std::vector<float>(size_t(nmax) * vd, 0.f));
  a.ws = dev.up(std::vector<float>(cuda::prefill_gdn_ws_floats(nmax, Hv, Dk, Dv), 0.f));
  a.y = dev.up(std::vector<uint16_t>(size_t(nmax) * vd, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  // mean of 5 calls of f after a warm-up call
  auto mean_ms = [&](auto f) {
    f();
    float ms = 0.f;
    EXPECT_EQ(cudaEventRecord(e0), cudaSuccess);
    for (int i = 0; i < 5; ++i) f();
    EXPECT_EQ(cudaEventRecord(e1), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(e1), cudaSuccess);
    EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaSuccess);
    return ms / 5;
  };
  // conv + scan + norm
  auto time_ms = [&](int n, bool chunked, int scan) {
    a.n = n;
    a.chunked = chunked;
    a.chunked_min_n = 1;  // time the chunked kernels at every length
    a.scan = scan;
    return mean_ms([&] { cuda::prefill_gdn(a, nullptr); });
  };
  for (int n : {8, 16, 32, 64, 128, 256, 512, 2048, 4096}) {
    const float seq = time_ms(n, false, -1), tc = time_ms(n, true, -1);
    std::printf("[ gdn speed ] n %5d: conv+scan+norm sequential (wide) %.3f ms  chunked tc %.3f ms (sequential / tc "
                "%.2fx)\n",
                n, seq, tc, seq / tc);
  }
  // the tensor-core delta rule alone (k_prep_tc + k_cscan_tc, no conv / norm) at the 35B head sizes
  for (int n : {2048, 4096}) {
    a.n = n;
    a.chunked = true;
    const float ms = mean_ms([&] { cuda::prefill_gdn_chunked_scan(a, nullptr); });
    std::printf("[ gdn speed ] n %5d: chunked tc delta rule alone (k_prep_tc + k_cscan_tc) %.3f ms\n", n, ms);
  }
  // the sequential scan kernels against each other at a full 2048-token chunk
  const int n = 2048;
  const float plain = time_ms(n, false, cuda::kGdnScanPlain), wide = time_ms(n, false, cuda::kGdnScanWide);
  std::printf("[ gdn speed ] n %5d: conv+scan+norm plain %.3f ms  wide %.3f ms  (plain / wide %.2fx)\n", n, plain,
              wide, plain / wide);
  CK(cudaGetLastError());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

}  // namespace

#endif  // LILY_HAVE_CUDA
