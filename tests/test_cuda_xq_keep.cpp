// The decode GEMVs' int8 activations (XQ, src/cuda/common/device_util.cuh) on x with massive activations: a few
// elements of a 32-element chunk thousands of times larger than the rest, as real LLMs' early-layer MLP intermediates
// and residual channels (which reach every normalised input). Where at most 4 elements of a chunk stand above 1/256
// of its max they are kept aside exactly and the others coded against their own max, so the others keep their 16
// bits; without that they would carry errors up to max/64516 (~1.5 next to 1e5). The error is measured against the
// exact product relative to the part of y that the small elements give (which the massive ones would otherwise
// swamp), beside the same launch on f32 x (LILY_CUDA_INT8_X=0, the reference path, whose f32 sums round the massive
// terms alike): the int8 path within 2x of it (plus 2e-5), and a chunk with 5 massive elements (not kept) far
// above it. On the GEMV with its RMSNorm prologue (4-bit affine and kQ6), the GEMV on a producer's XQ image
// (host-encoded, xq_image_host.h, whose kept values decode exactly), and the lm_head. Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "cuda_affine_mats.h"
#include "cuda_code8_mats.h"
#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "xq_image_host.h"

using namespace lily;
using testcuda::Dev;
using testcuda::down;

namespace {

struct Int8xRestore {
  bool v = cuda::decode_int8_x();
  ~Int8xRestore() { cuda::set_decode_int8_x(v); }
};

// x of n elements ~ U(-1, 1) with massive elements: chunk 0 elements 0..3 (as an MLP intermediate's few rows),
// chunk 18 element 17 and chunk 41 element 25 (two residual channels); five_big: chunk 50 gets 5 massive elements.
std::vector<float> massive_x(int n, float big, bool five_big, std::mt19937& rng, std::vector<char>& is_big) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = u(rng);
  is_big.assign(size_t(n), 0);
  auto put = [&](int i, float v) {
    x[size_t(i)] = v;
    is_big[size_t(i)] = 1;
  };
  for (int i = 0; i < 4; ++i) put(i, big * (i % 2 ? -0.6f - 0.1f * float(i) : 1.f - 0.05f * float(i)));
  put(18 * 32 + 17, 0.07f * big);
  put(41 * 32 + 25, -0.035f * big);
  if (five_big)
    for (int i = 0; i < 5; ++i) put(50 * 32 + 3 * i, 0.3f * big * (i % 2 ? -1.f : 1.f));
  return x;
}

// The small elements' part of y (the massive elements zeroed): the scale the errors are measured against.
template <class Mat>
std::vector<float> small_part(const Mat& m, const std::vector<float>& xn, const std::vector<char>& is_big) {
  std::vector<float> xs = xn, y(static_cast<size_t>(m.rows));
  for (size_t i = 0; i < xs.size(); ++i)
    if (is_big[i]) xs[i] = 0.f;
  ref::matvec(m, xs.data(), y.data());
  return y;
}

// rms(got - want) / rms(scale)
double err_vs(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& scale) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(scale[i]) * scale[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// GEMV with the RMSNorm prologue (XQ::put), 4-bit affine (bf16 pairs) and kQ6, 2048 columns.
TEST(CudaXqKeep, GemvNormPrologue) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  const int cols = 2048, rows = 300;
  for (const bool q6 : {false, true})
    for (const bool five : {false, true}) {
      SCOPED_TRACE(std::string(q6 ? "kQ6" : "4-bit") + (five ? " with a 5-massive chunk" : ""));
      std::mt19937 rng(71 + int(q6) * 2 + int(five));
      Dev dev;
      testcuda::FormStack a;
      testcuda::Code8Stack b;
      if (q6) testcuda::make_code8(b, 1, rows, cols, testcuda::Code8::Q6K, rng, dev);
      else testcuda::make_form(a, 1, rows, cols, 4, 64, testcuda::Origin::Bf16, rng, dev);
      const QMatrix& w = q6 ? b.src[0] : a.twin[0];
      const cuda::DMat& dm = q6 ? b.d.m : a.d.m;
      std::vector<char> is_big;
      const std::vector<float> x = massive_x(cols, 1e5f, five, rng, is_big);
      std::vector<float> nw(static_cast<size_t>(cols), 1.f), xn(static_cast<size_t>(cols)), want(rows);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      for (auto& v : nw) v = 1.f + 0.5f * u(rng);
      ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
      ref::matvec(w, xn.data(), want.data());
      auto run = [&](bool int8x) {
        cuda::set_decode_int8_x(int8x);
        float* dy = dev.poisoned(size_t(rows));
        cuda::GemvSeg seg{dm, dy, 0};
        cuda::gemv(&seg, 1, dev.up(x), dev.up(nw), 1e-6f, nullptr, false);
        EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // (ASSERT returns void)
        return down(dy, size_t(rows));
      };
      const std::vector<float> sp = small_part(w, xn, is_big);
      const double e_f32 = err_vs(run(false), want, sp), e_int8 = err_vs(run(true), want, sp);
      if (!five) {
        EXPECT_LT(e_int8, 2 * e_f32 + 2e-5);
      } else {
        EXPECT_GT(e_int8, 10 * e_f32);  // the 5-massive chunk is not kept: its others lose their bits
      }
      std::printf("[ xq keep gemv %s%s ] error of the small part: int8 x %.2e, f32 x %.2e\n", q6 ? "kQ6" : "4-bit",
                  five ? " 5-massive" : "", e_int8, e_f32);
    }
}

// GEMV on a producer's XQ image (host-encoded, HeadNorm::xq; one head over all columns, the head's factor applied
// to the kept values as to the steps).
TEST(CudaXqKeep, GemvXqImage) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  cuda::set_decode_int8_x(true);
  const int cols = 2048, rows = 300;
  std::mt19937 rng(83);
  Dev dev;
  testcuda::FormStack a;
  testcuda::make_form(a, 1, rows, cols, 4, 64, testcuda::Origin::Bf16, rng, dev);
  std::vector<char> is_big;
  const std::vector<float> x = massive_x(cols, 1e4f, false, rng, is_big);
  const std::vector<uint8_t> img = testcuda::xq_encode(x);
  ASSERT_EQ(img.size(), cuda::xq_image_bytes(cols));
  std::vector<float> xd, xs32;
  testcuda::xq_decode(img, cols, xd, xs32);
  for (int i = 0; i < cols; ++i)
    if (is_big[size_t(i)]) {
      EXPECT_EQ(xd[size_t(i)], x[size_t(i)]) << "element " << i << " not kept exactly";
    }
  const float ss = 4.f * float(cols), r = 1.f / std::sqrt(ss / float(cols) + 1e-6f);
  std::vector<float> xr(x), want(rows);
  for (auto& v : xr) v *= r;
  ref::matvec(a.twin[0], xr.data(), want.data());
  cuda::HeadNorm hn;
  hn.ss = dev.up(std::vector<float>{ss});
  hn.dim = cols;
  hn.parts = 1;
  hn.xq = dev.up(img);
  float* dy = dev.poisoned(size_t(rows));
  cuda::GemvSeg seg{a.d.m, dy, 0};
  cuda::gemv(&seg, 1, nullptr, nullptr, 1e-6f, nullptr, false, nullptr, &hn);
  CK(cudaDeviceSynchronize());
  // the f32-x reference: the same x (times the head's factor) through the norm-free GEMV
  cuda::set_decode_int8_x(false);
  float* dyf = dev.poisoned(size_t(rows));
  cuda::GemvSeg segf{a.d.m, dyf, 0};
  cuda::gemv(&segf, 1, dev.up(xr), nullptr, 1e-6f, nullptr, false);
  CK(cudaDeviceSynchronize());
  const std::vector<float> sp = small_part(a.twin[0], xr, is_big);
  const double e_int8 = err_vs(down(dy, size_t(rows)), want, sp), e_f32 = err_vs(down(dyf, size_t(rows)), want, sp);
  EXPECT_LT(e_int8, 2 * e_f32 + 2e-5);
  std::printf("[ xq keep gemv image ] error of the small part: int8 x %.2e, f32 x %.2e\n", e_int8, e_f32);
}

// lm_head (4-bit rows, RMSNorm prologue) on x with massive channels.
TEST(CudaXqKeep, LmHead) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xRestore restore;
  const int cols = 2048, rows = 5003;
  std::mt19937 rng(97);
  Dev dev;
  testcuda::FormStack m;
  testcuda::make_form(m, 1, rows, cols, 4, 64, testcuda::Origin::Bf16, rng, dev);
  std::vector<char> is_big;
  const std::vector<float> x = massive_x(cols, 3e4f, false, rng, is_big);
  std::vector<float> nw(static_cast<size_t>(cols), 1.f), xn(static_cast<size_t>(cols)), want(static_cast<size_t>(rows));
  ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
  ref::matvec(m.twin[0], xn.data(), want.data());
  auto run = [&](bool int8x) {
    cuda::set_decode_int8_x(int8x);
    float* dl = dev.poisoned(size_t(rows));
    int32_t* din = dev.up(std::vector<int32_t>{7, -1, -1, -1});
    int32_t* dout = dev.up(std::vector<int32_t>(4, -1));
    cuda::StepCtl c;
    c.n_given = 1;
    cuda::StepCtl* dc = dev.up(std::vector<cuda::StepCtl>{c});
    cuda::lm_head_argmax(m.d.m, dev.up(x), dev.up(nw), 1e-6f, dl, din, dout, dc, nullptr, false);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // (ASSERT returns void)
    return down(dl, size_t(rows));
  };
  const std::vector<float> sp = small_part(m.twin[0], xn, is_big);
  const double e_f32 = err_vs(run(false), want, sp), e_int8 = err_vs(run(true), want, sp);
  EXPECT_LT(e_int8, 2 * e_f32 + 2e-5);
  std::printf("[ xq keep lm_head ] error of the small part: int8 x %.2e, f32 x %.2e\n", e_int8, e_f32);
}

}  // namespace
#endif
