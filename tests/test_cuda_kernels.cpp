// CUDA kernel tests against the f32 reference kernels (src/cpu/ref_ops.h) on random inputs. Skipped when the
// build has no CUDA backend or no device is present. Outputs are poisoned (0xFF bytes = NaN) before each run.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_buffers.h"
#include "test_metrics.h"
#include "xq_image_host.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cpu/ref_ops.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "int8x_model.h"

using namespace lily;
using lily::testcuda::Dev;
using lily::testcuda::down;
using lily::testcuda::xq_encode;

namespace {

// A random matrix in host memory (QMatrix view) plus its device copy (DMat).
struct TestMat {
  std::vector<uint32_t> wq;          // affine packed
  std::vector<uint16_t> w16, s, b;   // dense bf16, scales, biases
  QMatrix q;
  cuda::DMat d;
  std::vector<void*> dev;
  ~TestMat() {
    for (void* p : dev) cudaFree(p);
  }
};

void make_mat(TestMat& t, int rows, int cols, int fmt, std::mt19937& rng, int group = 64) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  t.q.rows = rows;
  t.q.cols = cols;
  t.d.rows = rows;
  t.d.cols = cols;
  t.d.fmt = fmt;
  void* dw = nullptr;
  if (fmt == cuda::kBF16) {
    t.w16.resize(size_t(rows) * cols);
    for (auto& v : t.w16) v = f32_to_bf16(u(rng) * 0.1f);
    t.q.kind = QMatrix::Kind::Dense;
    t.q.dtype = DType::BF16;
    t.q.w = t.w16.data();
    t.d.row_bytes = cols * 2;
    ASSERT_EQ(cudaMalloc(&dw, t.w16.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, t.w16.data(), t.w16.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
  } else {
    const int bits = fmt;
    t.wq.resize(size_t(rows) * cols * bits / 32);
    for (auto& v : t.wq) v = uint32_t(rng());
    const size_t ng = size_t(rows) * cols / group;
    t.s.resize(ng);
    t.b.resize(ng);
    std::vector<uint32_t> sb(ng);
    for (size_t i = 0; i < ng; ++i) {
      t.s[i] = f32_to_bf16(u(rng) * 0.02f);
      t.b[i] = f32_to_bf16(u(rng) * 0.1f);
      sb[i] = uint32_t(t.s[i]) | (uint32_t(t.b[i]) << 16);
    }
    t.q.kind = QMatrix::Kind::Affine;
    t.q.sdtype = DType::BF16;
    t.q.w = t.wq.data();
    t.q.scales = t.s.data();
    t.q.biases = t.b.data();
    t.q.bits = bits;
    t.q.group = group;
    cuda::dmat_set_group(t.d, group);
    t.d.row_bytes = cols * bits / 8;
    t.d.sb_row = cols / group;
    void* dsb = nullptr;
    ASSERT_EQ(cudaMalloc(&dw, t.wq.size() * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dw, t.wq.data(), t.wq.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dsb, ng * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dsb, sb.data(), ng * 4, cudaMemcpyHostToDevice), cudaSuccess);
    t.dev.push_back(dsb);
    t.d.sb = static_cast<const uint32_t*>(dsb);
  }
  t.dev.push_back(dw);
  t.d.w = static_cast<const uint8_t*>(dw);
}


class CudaGemv : public ::testing::TestWithParam<std::tuple<int, int, bool, bool, bool>> {};

// Two segments sharing x (one plain, one accumulating into a random residual), with and without RMSNorm, with f32
// activations and (4-bit only) the int8 hi+lo dp4a path; `big`: 9000 rows, enough for 4 rows per warp in flight.
TEST_P(CudaGemv, MatchesReferenceMatvec) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const auto [fmt, cols, norm, int8x, big] = GetParam();
  if (int8x && fmt != cuda::kQ4) GTEST_SKIP() << "int8 activations serve 4-bit weights only";
  struct Restore {
    bool v = cuda::decode_int8_x();
    ~Restore() { cuda::set_decode_int8_x(v); }
  } restore;
  cuda::set_decode_int8_x(int8x);
  std::mt19937 rng(1234 + fmt * 7 + cols + norm);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const int rows0 = big ? 9000 : 300, rows1 = 77;
  TestMat m0, m1;
  make_mat(m0, rows0, cols, fmt, rng);
  make_mat(m1, rows1, cols, fmt, rng);
  std::vector<float> x(cols), nw(cols), y1(rows1);
  for (auto& v : x) v = u(rng) * 3.f;
  for (auto& v : nw) v = 1.f + 0.5f * u(rng);
  for (auto& v : y1) v = u(rng);
  // reference
  std::vector<float> xn(x);
  if (norm) ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
  std::vector<float> want0(rows0), want1(rows1);
  ref::matvec(m0.q, xn.data(), want0.data());
  ref::matvec(m1.q, xn.data(), want1.data());
  for (int i = 0; i < rows1; ++i) want1[size_t(i)] += y1[size_t(i)];
  // device
  float *dx, *dn, *dy0, *dy1;
  CK(cudaMalloc(reinterpret_cast<void**>(&dx), cols * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&dn), cols * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&dy0), rows0 * 4));
  CK(cudaMalloc(reinterpret_cast<void**>(&dy1), rows1 * 4));
  CK(cudaMemcpy(dx, x.data(), cols * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dn, nw.data(), cols * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(dy0, 0xFF, rows0 * 4));
  CK(cudaMemcpy(dy1, y1.data(), rows1 * 4, cudaMemcpyHostToDevice));
  cuda::GemvSeg segs[2] = {{m0.d, dy0, 0}, {m1.d, dy1, 1}};
  cuda::gemv(segs, 2, dx, norm ? dn : nullptr, 1e-6f, nullptr, false);
  CK(cudaDeviceSynchronize());
  std::vector<float> got0(rows0), got1(rows1);
  CK(cudaMemcpy(got0.data(), dy0, rows0 * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got1.data(), dy1, rows1 * 4, cudaMemcpyDeviceToHost));
  cudaFree(dx);
  cudaFree(dn);
  cudaFree(dy0);
  cudaFree(dy1);
  // int8 x: each element within max|x of its 32-chunk| / 64516, ~1.3e-5 RMS-relative on these inputs (error
  // model in device_util.cuh); a wrong nibble/byte order gives O(1). f32 x: rounding only.
  const double bound = int8x ? 5e-5 : 1e-5;
  EXPECT_LT(testmetrics::rms_rel_err(got0, want0), bound);
  EXPECT_LT(testmetrics::rms_rel_err(got1, want1), bound);
  if (int8x) {  // and the kernel implements the int8 model (int8x_model.h) up to f32 rounding
    std::vector<float> q0(rows0), q1(rows1);
    testing_int8x::matvec_hilo(m0.q, xn.data(), q0.data());
    testing_int8x::matvec_hilo(m1.q, xn.data(), q1.data());
    for (int i = 0; i < rows1; ++i) q1[size_t(i)] += y1[size_t(i)];
    EXPECT_LT(testmetrics::rms_rel_err(got0, q0), 1e-5);
    EXPECT_LT(testmetrics::rms_rel_err(got1, q1), 1e-5);
  }
  if (int8x) {
    EXPECT_GT(testmetrics::rms_rel_err(got0, want0), 0.0) << "int8 path did not run (result bit-identical to f32)";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGemv,
                         ::testing::Combine(::testing::Values(int(cuda::kQ4), int(cuda::kQ8), int(cuda::kBF16)),
                                            ::testing::Values(128, 2048, 4096), ::testing::Bool(),
                                            ::testing::Bool(), ::testing::Bool()));

// Group sizes whose sb index is a shift (group / chunk elements a power of two) and ones that divide (96: 3 or 6
// chunks; the whole 768-column row: 24 or 48), 4-bit (32-element chunks) and 8-bit (16), f32 and int8 x.
TEST(CudaGemv, GroupSizesShiftOrDivide) {
  struct Case {
    int fmt, group, gshift;
  };
  const Case cases[] = {{cuda::kQ4, 32, 0},  {cuda::kQ4, 128, 2}, {cuda::kQ4, 256, 3}, {cuda::kQ4, 96, -1},
                        {cuda::kQ4, 768, -1}, {cuda::kQ8, 32, 1},  {cuda::kQ8, 128, 3}, {cuda::kQ8, 96, -1},
                        {cuda::kQ8, 768, -1}};
  for (const Case& c : cases) {
    cuda::DMat d;
    d.fmt = c.fmt;
    cuda::dmat_set_group(d, c.group);
    EXPECT_EQ(d.gshift, c.gshift) << "fmt " << c.fmt << " group " << c.group;
  }
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  struct Restore {
    bool v = cuda::decode_int8_x();
    ~Restore() { cuda::set_decode_int8_x(v); }
  } restore;
  const int rows = 333, cols = 768;
  for (const Case& c : cases)
    for (const bool int8x : {false, true}) {
      if (int8x && c.fmt != cuda::kQ4) continue;
      cuda::set_decode_int8_x(int8x);
      std::mt19937 rng(77 + c.group + c.fmt);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      TestMat m;
      make_mat(m, rows, cols, c.fmt, rng, c.group);
      ASSERT_EQ(m.d.gshift, c.gshift);
      std::vector<float> x(cols), want(rows), got(rows);
      for (auto& v : x) v = u(rng) * 3.f;
      ref::matvec(m.q, x.data(), want.data());
      float *dx, *dy;
      CK(cudaMalloc(reinterpret_cast<void**>(&dx), cols * 4));
      CK(cudaMalloc(reinterpret_cast<void**>(&dy), rows * 4));
      CK(cudaMemcpy(dx, x.data(), cols * 4, cudaMemcpyHostToDevice));
      cuda::GemvSeg seg{m.d, dy, 0};
      cuda::gemv(&seg, 1, dx, nullptr, 1e-6f, nullptr, false);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(got.data(), dy, rows * 4, cudaMemcpyDeviceToHost));
      cudaFree(dx);
      cudaFree(dy);
      EXPECT_LT(testmetrics::rms_rel_err(got, want), int8x ? 5e-5 : 1e-5)
          << "fmt " << c.fmt << " group " << c.group << " int8 x " << int8x;
    }
}

// The GEMV's per-head scale prologue (HeadNorm: the DeltaNet gated norm's RMS factor, finished by out_proj): x read
// as heads of 128, head h times rsqrt(sum of its 4 partial sums / 128 + eps), against the reference matvec of the
// scaled x; 4-bit weights with f32 and with int8 x, and bf16; x as an XQ image (4-bit, int8 x only).
TEST(CudaGemv, HeadNormScalesEachHead) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  struct Restore {
    bool v = cuda::decode_int8_x();
    ~Restore() { cuda::set_decode_int8_x(v); }
  } restore;
  const int cols = 4096, rows = 2048, dim = 128, parts = 4, heads = cols / dim;
  for (const int fmt : {int(cuda::kQ4), int(cuda::kBF16)})
    for (const bool int8x : {false, true}) {
      if (int8x && fmt != cuda::kQ4) continue;
      SCOPED_TRACE("fmt " + std::to_string(fmt) + (int8x ? " int8 x" : " f32 x"));
      cuda::set_decode_int8_x(int8x);
      std::mt19937 rng(31 + fmt + int8x);
      std::uniform_real_distribution<float> u(-1.f, 1.f);
      TestMat m;
      make_mat(m, rows, cols, fmt, rng);
      std::vector<float> x(cols), ss(size_t(heads) * parts), xs(cols), want(rows);
      for (auto& v : x) v = u(rng);
      for (auto& v : ss) v = 10.f * (1.f + u(rng));  // heads of very different scale
      for (int h = 0; h < heads; ++h) {
        float t = 0.f;
        for (int q = 0; q < parts; ++q) t += ss[size_t(h) * parts + q];
        const float r = 1.f / std::sqrt(t / float(dim) + 1e-6f);
        for (int i = 0; i < dim; ++i) xs[size_t(h) * dim + i] = x[size_t(h) * dim + i] * r;
      }
      ref::matvec(m.q, xs.data(), want.data());
      Dev dev;
      float* dx = dev.up(x);
      float* dss = dev.up(ss);
      float* dy = dev.poisoned(rows);
      cuda::GemvSeg seg = {m.d, dy, 0};
      const cuda::HeadNorm hn = {dss, dim, parts, 1e-6f};
      cuda::gemv(&seg, 1, dx, nullptr, 1e-6f, nullptr, false, nullptr, &hn);
      CK(cudaDeviceSynchronize());
      const std::vector<float> got = down(dy, rows);
      const cuda::HeadNorm bad = {dss, 96, parts, 1e-6f};  // 4096 % 96 != 0: rejected before any launch
      EXPECT_THROW(cuda::gemv(&seg, 1, dx, nullptr, 1e-6f, nullptr, false, nullptr, &bad), lily::Error);
      EXPECT_LT(testmetrics::rms_rel_err(got, want), int8x ? 5e-5 : 1e-5);  // the bounds of the GEMV test above
      // x given as its producer's XQ image (quantised without the heads' factors): the int8 path's bound
      const std::vector<uint8_t> img = xq_encode(x);
      const cuda::HeadNorm hq = {dss, dim, parts, 1e-6f, dev.up(img)};
      if (!int8x) {  // f32 x, or not 4-bit: rejected
        EXPECT_THROW(cuda::gemv(&seg, 1, dx, nullptr, 1e-6f, nullptr, false, nullptr, &hq), lily::Error);
        continue;
      }
      float* dy2 = dev.poisoned(rows);
      cuda::GemvSeg seg2 = {m.d, dy2, 0};
      cuda::gemv(&seg2, 1, nullptr, nullptr, 1e-6f, nullptr, false, nullptr, &hq);
      CK(cudaDeviceSynchronize());
      EXPECT_LT(testmetrics::rms_rel_err(down(dy2, rows), want), 5e-5);
    }
}

// lm_head + greedy pick on the device: logits against the reference matvec of the normed x (int8 x for 4-bit
// weights: the error model bound of the GEMV test), the chosen id = the argmax of the logits it wrote (lowest id on
// ties), fed into the next step's input; cursor and position advance and the accumulators reset (two steps).
TEST(CudaLmHead, LogitsArgmaxAndStepAdvance) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  // 5003 rows: at most one row per warp; 70001: ~33 rows per warp, so every row set of the 4-bit form
  // (k_lm_head's NB) turns over several times. Neither is a multiple of any warp / block count. 4096 columns:
  // rows of more than one chunk round (the one-set loop's further rounds).
  struct Case {
    int fmt, rows, cols;
  };
  for (const Case k : {Case{cuda::kQ4, 5003, 2048}, Case{cuda::kQ4, 70001, 2048}, Case{cuda::kQ4, 20011, 4096},
                       Case{cuda::kBF16, 5003, 2048}, Case{cuda::kBF16, 70001, 2048}}) {
    const int fmt = k.fmt, rows = k.rows, cols = k.cols;
    SCOPED_TRACE("fmt " + std::to_string(fmt) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    std::mt19937 rng(99 + fmt);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    TestMat m;
    make_mat(m, rows, cols, fmt, rng);
    std::vector<float> x(cols), nw(cols);
    for (auto& v : x) v = 3.f * u(rng);
    for (auto& v : nw) v = 1.f + 0.5f * u(rng);
    std::vector<float> xn(cols), want(rows);
    ref::rmsnorm(x.data(), nw.data(), cols, 1e-6f, xn.data());
    ref::matvec(m.q, xn.data(), want.data());
    Dev dev;
    float* dx = dev.up(x);
    float* dn = dev.up(nw);
    float* dl = dev.poisoned(rows);
    std::vector<int32_t> ids(4, -1);
    ids[0] = 7;
    int32_t* din = dev.up(ids);
    int32_t* dout = dev.up(std::vector<int32_t>(4, -1));
    cuda::StepCtl c;
    c.n_given = 1;
    cuda::StepCtl* dc = dev.up(std::vector<cuda::StepCtl>{c});
    for (int step = 0; step < 2; ++step) {
      cuda::lm_head_argmax(m.d, dx, dn, 1e-6f, dl, din, dout, dc, nullptr, false);
      CK(cudaDeviceSynchronize());
      const std::vector<float> got = down(dl, rows);
      const double bound = fmt == cuda::kQ4 && cuda::decode_int8_x() ? 5e-5 : 1e-5;
      EXPECT_LT(testmetrics::rms_rel_err(got, want), bound);
      int best = 0;
      for (int i = 1; i < rows; ++i)
        if (got[size_t(i)] > got[size_t(best)]) best = i;
      const std::vector<int32_t> o = down(dout, 4), in = down(din, 4);
      EXPECT_EQ(o[size_t(step)], best) << "step " << step;
      EXPECT_EQ(in[size_t(step) + 1], best) << "the id feeds the next step's input";
      const cuda::StepCtl h = down(dc, 1)[0];
      EXPECT_EQ(h.cursor, step + 1);
      EXPECT_EQ(h.pos, step + 1);
      EXPECT_EQ(h.best, 0ull);
      EXPECT_EQ(h.lm_done, 0u);
    }
  }
}

}  // namespace

#endif  // LILY_HAVE_CUDA
