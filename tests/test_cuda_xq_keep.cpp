// The decode GEMVs' int8 activations (XQ, src/cuda/common/device_util.cuh) on x with massive activations: a few
// elements of a 32-element chunk thousands of times larger than the rest, as real LLMs' early-layer MLP intermediates
// and residual channels (which reach every normalised input). Where at most 4 elements of a chunk stand above 1/256
// of its max they are kept aside exactly and the others coded against their own max, so the others keep their 16
// bits; without that they would carry errors up to max/64516 (~1.5 next to 1e5). Checked against the exact f32
// product with the error measured against the part of y that the small elements give (which the massive ones
// would otherwise swamp), and against the host model of the form (int8x_model.h, xq_image_host.h), on: the GEMV with
// its RMSNorm prologue (4-bit affine and kQ6), the GEMV on a producer's XQ image (head-normed), and the lm_head.
// Also a chunk with 5 massive elements (not kept: the model's form, as before). Skipped without a device.
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
#include "int8x_model.h"
#include "test_metrics.h"
#include "xq_image_host.h"

using namespace lily;
using testcuda::Dev;
using testcuda::down;

namespace {

struct Int8xOn {
  bool v = cuda::decode_int8_x();
  Int8xOn() { cuda::set_decode_int8_x(true); }
  ~Int8xOn() { cuda::set_decode_int8_x(v); }
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

std::vector<float> model_matvec(const QMatrix& m, const std::vector<float>& x, bool affine) {
  std::vector<float> y(static_cast<size_t>(m.rows));
  if (affine) {
    testing_int8x::matvec_hilo(m, x.data(), y.data());
  } else {
    const std::vector<float> xq = testing_int8x::quant_hilo(x.data(), int(x.size()));
    ref::matvec(m, xq.data(), y.data());
  }
  return y;
}

// GEMV with the RMSNorm prologue (XQ::put), 4-bit affine (bf16 pairs) and kQ6, 2048 columns.
TEST(CudaXqKeep, GemvNormPrologue) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xOn on;
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
      float* dy = dev.poisoned(size_t(rows));
      cuda::GemvSeg seg{dm, dy, 0};
      cuda::gemv(&seg, 1, dev.up(x), dev.up(nw), 1e-6f, nullptr, false);
      CK(cudaDeviceSynchronize());
      const std::vector<float> got = down(dy, size_t(rows));
      const std::vector<float> sp = small_part(w, xn, is_big), model = model_matvec(w, xn, !q6);
      const double e_exact = err_vs(got, want, sp), e_model = err_vs(got, model, sp);
      EXPECT_LT(e_model, 1e-5);               // the form as the host model has it, up to f32 rounding
      if (!five) {
        EXPECT_LT(e_exact, 2e-4);  // CudaAffineForms' int8-x bound, here of the small part
      } else {
        EXPECT_GT(e_exact, 1e-3);  // the 5-massive chunk is not kept: its others lose their bits
      }
      std::printf("[ xq keep gemv %s%s ] vs exact %.2e (of the small part), vs model %.2e\n", q6 ? "kQ6" : "4-bit",
                  five ? " 5-massive" : "", e_exact, e_model);
    }
}

// GEMV on a producer's XQ image (host-encoded, HeadNorm::xq; one head over all columns, the head's factor applied
// to the kept values as to the steps).
TEST(CudaXqKeep, GemvXqImage) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xOn on;
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
  std::vector<float> xr(x), want(rows), model(rows);
  for (auto& v : xr) v *= r;
  ref::matvec(a.twin[0], xr.data(), want.data());
  std::vector<float> xdr(xd);
  for (auto& v : xdr) v *= r;
  testing_int8x::matvec_hilo_prequant(a.twin[0], xdr.data(), xr.data(), model.data());  // bias on the exact sums
  cuda::HeadNorm hn;
  hn.ss = dev.up(std::vector<float>{ss});
  hn.dim = cols;
  hn.parts = 1;
  hn.xq = dev.up(img);
  float* dy = dev.poisoned(size_t(rows));
  cuda::GemvSeg seg{a.d.m, dy, 0};
  cuda::gemv(&seg, 1, nullptr, nullptr, 1e-6f, nullptr, false, nullptr, &hn);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = down(dy, size_t(rows)), sp = small_part(a.twin[0], xr, is_big);
  const double e_exact = err_vs(got, want, sp), e_model = err_vs(got, model, sp);
  EXPECT_LT(e_exact, 2e-4);
  EXPECT_LT(e_model, 1e-5);
  std::printf("[ xq keep gemv image ] vs exact %.2e (of the small part), vs model %.2e\n", e_exact, e_model);
}

// lm_head (4-bit rows, RMSNorm prologue) on x with massive channels.
TEST(CudaXqKeep, LmHead) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  Int8xOn on;
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
  float* dl = dev.poisoned(size_t(rows));
  int32_t* din = dev.up(std::vector<int32_t>{7, -1, -1, -1});
  int32_t* dout = dev.up(std::vector<int32_t>(4, -1));
  cuda::StepCtl c;
  c.n_given = 1;
  cuda::StepCtl* dc = dev.up(std::vector<cuda::StepCtl>{c});
  cuda::lm_head_argmax(m.d.m, dev.up(x), dev.up(nw), 1e-6f, dl, din, dout, dc, nullptr, false);
  CK(cudaDeviceSynchronize());
  const std::vector<float> got = down(dl, size_t(rows)), sp = small_part(m.twin[0], xn, is_big);
  const double e_exact = err_vs(got, want, sp), e_model = err_vs(got, model_matvec(m.twin[0], xn, true), sp);
  EXPECT_LT(e_exact, 2e-4);
  EXPECT_LT(e_model, 1e-5);
  std::printf("[ xq keep lm_head ] vs exact %.2e (of the small part), vs model %.2e\n", e_exact, e_model);
}

}  // namespace
#endif
