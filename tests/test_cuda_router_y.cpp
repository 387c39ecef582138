// Router-from-y (src/cuda/decode/router_y.cu, the default unless LILY_CUDA_ROUTER_Y=0) kernel tests: the GEMV's side rows (GemvSide) next to
// its own 4-bit rows, against a host double reference (f32 x and the int8 hi+lo x model), on the whole-row path (4096
// columns, the model's out_proj) and the looped one: int16 rows on the GEMV's x, or 8-bit rows on its raw x times a
// weight vector (in_proj's, before the norm); and M made at load against a host double product. Outputs poisoned;
// skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <vector>

#include "cuda_aff_stack.h"
#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "core/dtype.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "cuda/decode/router_y.h"
#include "int8x_model.h"

using namespace lily;

namespace {

using testcuda::AffStack;
using testcuda::Dev;
using testcuda::down;
using testcuda::make_stack;

// A host QMatrix dequantised (model/weights.h dequant_row), [rows][cols].
std::vector<float> dense(const QMatrix& m) {
  std::vector<float> d(size_t(m.rows) * m.cols);
  for (int64_t r = 0; r < m.rows; ++r) dequant_row(m, r, d.data() + size_t(r) * m.cols);
  return d;
}

// Random int16 codes over the whole range (both ends included), as their bits.
std::vector<uint16_t> random_i16(size_t n, std::mt19937& rng) {
  std::vector<uint16_t> h(n);
  for (auto& v : h) v = uint16_t(rng());
  h[0] = 0x8000u;  // -32768
  if (n > 1) h[1] = 0x7fffu;
  return h;
}
double i16(uint16_t bits) { return double(int16_t(bits)); }

// (int8 x, rows, cols, side rows R, kind): kind 0 = int16 rows on the GEMV's x (out_proj's M y); 3 = int16 rows times
// rscale on the raw x (m_raw: A from int16 rows of W_r diag(nw), q/k/v's side rows)
class CudaGemvSide : public ::testing::TestWithParam<std::tuple<bool, int, int, int, int>> {};

TEST_P(CudaGemvSide, MatchesReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const bool int8x = std::get<0>(GetParam());
  const int rows = std::get<1>(GetParam()), cols = std::get<2>(GetParam()), R = std::get<3>(GetParam());
  const int kind = std::get<4>(GetParam());
  const bool raw = kind > 0;
  struct Restore {
    bool v = cuda::decode_int8_x();
    ~Restore() { cuda::set_decode_int8_x(v); }
  } restore;
  cuda::set_decode_int8_x(int8x);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  AffStack o;
  make_stack(o, 1, rows, cols, 4, rng, dev);
  std::vector<float> x(cols), rs(R), nw(cols), xn(cols);
  for (auto& v : x) v = 2.f * u(rng);
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  if (raw) ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
  const std::vector<float>& xg = raw ? xn : x;  // the GEMV's own x
  for (auto& v : rs) v = (1.f + 0.5f * u(rng)) / 4096.f;
  const std::vector<uint16_t> m = random_i16(size_t(R) * cols, rng);
  const int pieces = cols / cuda::kGemvSidePiece, ld = R + 3;  // piece-major partials here (the backend: row-major)
  // references: the x the side rows see (the raw x exact; else the GEMV's x, exact or the int8 hi+lo model's values)
  const std::vector<float> xe = int8x && !raw ? testing_int8x::quant_hilo(x.data(), cols) : x;
  std::vector<float> want_y(rows), want_p;
  if (int8x) testing_int8x::matvec_hilo(o.q[0], xg.data(), want_y.data());
  else ref::matvec(o.q[0], xg.data(), want_y.data());
  for (int q = 0; q < pieces; ++q)
    for (int j = 0; j < R; ++j) {
      double a = 0;
      for (int c = q * cuda::kGemvSidePiece; c < (q + 1) * cuda::kGemvSidePiece; ++c)
        a += i16(m[size_t(j) * cols + c]) * xe[size_t(c)];
      want_p.push_back(float(a * rs[size_t(j)]));
    }
  cuda::GemvSeg seg = {o.d.m, dev.poisoned(rows), 0};
  cuda::GemvSide side;
  side.m_raw = raw;
  side.m = dev.up(m);
  side.rscale = dev.up(rs);
  side.part = dev.poisoned(size_t(pieces) * ld);
  side.rows = R;
  side.pieces = pieces;
  side.part_q = ld;
  side.part_j = 1;
  cuda::gemv(&seg, 1, dev.up(x), raw ? dev.up(nw) : nullptr, 1e-6f, nullptr, true, nullptr, nullptr, &side);
  CK(cudaDeviceSynchronize());
  EXPECT_LT(testmetrics::rms_rel_err(down(seg.y, rows), want_y), 1e-5);
  const std::vector<float> part = down(side.part, size_t(pieces) * ld);
  std::vector<float> got;
  for (int q = 0; q < pieces; ++q)
    for (int j = 0; j < R; ++j) got.push_back(part[size_t(q) * ld + j]);
  EXPECT_LT(testmetrics::rms_rel_err(got, want_p), 1e-5);
  for (int q = 0; q < pieces; ++q) EXPECT_TRUE(std::isnan(part[size_t(q) * ld + R])) << "past the side rows";
}

// (2048, 4096): the model's out_proj (whole rows, 8 pieces); (512, 1024): the looped GEMV; (64, 512): more side
// pieces than rows (the grid sized by the side); (12352, 2048) 8-bit: the model's DeltaNet in_proj with 4 rows per
// warp; bf16 rows with f32 x (the bf16 checkpoint's path)
INSTANTIATE_TEST_SUITE_P(WholeAndLooped, CudaGemvSide,
                         ::testing::Values(std::make_tuple(true, 2048, 4096, 257, 0),
                                           std::make_tuple(false, 2048, 4096, 257, 0),
                                           std::make_tuple(true, 512, 1024, 33, 0),
                                           std::make_tuple(false, 512, 1024, 33, 0),
                                           std::make_tuple(true, 64, 512, 257, 0),
                                           std::make_tuple(true, 12352, 2048, 257, 3),
                                           std::make_tuple(false, 512, 1024, 33, 3)));

// M = W_r diag(nw) O (8-bit router and shared gate, 4-bit O), rows as int16 times a per-row scale, against the host
// product in double: every entry within half a step (the row's largest / 65534) plus the f32 product's rounding
// (f16 rows, before, were off by up to 2^-12 of the entry: up to 8x a step near the row's largest).
TEST(CudaRouterY, ComposeMatchesHost) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int H = 512, E = 64, N = 1024;
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Dev dev;
  AffStack router, shg, o;
  make_stack(router, 1, E, H, 8, rng, dev);
  make_stack(shg, 1, 1, H, 8, rng, dev);
  make_stack(o, 1, H, N, 4, rng, dev);
  std::vector<float> nw(H);
  for (auto& v : nw) v = 1.f + 0.3f * u(rng);
  const std::vector<float> od = dense(o.q[0]), rd = dense(router.q[0]), sd = dense(shg.q[0]);
  std::vector<float> want(size_t(E + 1) * N);
  for (int j = 0; j <= E; ++j) {
    std::vector<double> acc(N, 0.0);
    for (int r = 0; r < H; ++r) {
      const double w = double(j < E ? rd[size_t(j) * H + r] : sd[size_t(r)]) * nw[size_t(r)];
      for (int c = 0; c < N; ++c) acc[size_t(c)] += w * od[size_t(r) * N + c];
    }
    for (int c = 0; c < N; ++c) want[size_t(j) * N + c] = float(acc[size_t(c)]);
  }
  uint16_t* m = dev.poisoned<uint16_t>(size_t(E + 1) * N);
  float* rs = dev.poisoned(E + 1);
  float* scratch = dev.poisoned(cuda::compose_router_scratch_floats(E, H, N));
  cuda::compose_router(router.d.m, shg.d.m, dev.up(nw), o.d.m, m, rs, scratch, nullptr);
  CK(cudaDeviceSynchronize());
  const std::vector<uint16_t> mh = down(m, size_t(E + 1) * N);
  const std::vector<float> rh = down(rs, size_t(E + 1));
  for (int j = 0; j <= E; ++j) {
    double mx = 0, wmx = 0, err = 0;
    for (int c = 0; c < N; ++c) {
      const size_t i = size_t(j) * N + c;
      mx = std::max(mx, std::fabs(i16(mh[i])));
      wmx = std::max(wmx, double(std::fabs(want[i])));
      err = std::max(err, std::fabs(i16(mh[i]) * rh[size_t(j)] - double(want[i])));
    }
    EXPECT_EQ(mx, 32767.0) << "row " << j << ": its largest entry maps to 32767";
    EXPECT_LE(err, 0.5 * rh[size_t(j)] + 2e-6 * wmx) << "row " << j;
  }
}

}  // namespace

#endif  // LILY_HAVE_CUDA
