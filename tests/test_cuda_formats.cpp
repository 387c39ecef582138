// The CUDA backend on the formats repacked at load against the reference CPU path on the same weights: MLX 3/5/6-bit
// (8-bit codes, groups 32 and 128), GPTQ / AWQ / compressed-tensors int4 and GGUF Q4_0 / Q4_1 / Q5_0 / Q5_1 / Q8_0
// (f32 scales: the reference runs on the device twin, the bf16 (scale, bias) pairs the backend keeps,
// device_pairs.h), the synthetic Q4_K_M-like GGUF (Q6_K as kQ6 chunks on the device), and FP8 blocks (e4m3 codes
// on the device). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA

#include <algorithm>
#include <cmath>

#include "cuda/cuda_factory.h"
#include "device_pairs.h"
#include "gguf_convert_util.h"
#include "loader_test_util.h"
#include "quant/quantize_checkpoint.h"
#include "quant_fixture_writers.h"
#include "quant_test_util.h"
#include "synth/gguf_checkpoint.h"
#include "synth/synth_tokenizer.h"
#include "synth/synthetic_model.h"

using namespace lily;
using namespace lily_test;

namespace {

// Prompt token by token through the decode step (as test_cuda_model.cpp holds it to 5e-2) vs cpu-ref on `ref_w`
// (the same weights, or their device twin); then the whole prompt through the batched prefill (default split
// operands) held to test_cuda_prefill_model.cpp's fp16 bound (0.15, one top-1 flip at most), which split is within.
// Returns the decode path's max |dlogit|; decode_bound replaces 5e-2 where given.
double expect_close_to_reference(const std::shared_ptr<ModelWeights>& w, const std::shared_ptr<ModelWeights>& ref_w,
                                 const std::string& what, double decode_bound = 5e-2) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> ids = {1, 17, 4000, 256, 3, 99, 1024, 7, 4095, 12};
  const auto ref = logits_of(ref_w, "cpu-ref", ids);
  const int V = w->cfg.vocab, n = int(ids.size());
  auto top = [](const float* p, int V) { return std::max_element(p, p + V) - p; };
  double decode_worst = 0;
  {
    setenv("LILY_CUDA_PREFILL", "decode", 1);
    auto be = make_cuda_backend(w);
    unsetenv("LILY_CUDA_PREFILL");
    auto st = be->new_state(64);
    std::vector<float> got(static_cast<size_t>(V));
    double worst = 0;
    for (int t = 0; t < n; ++t) {
      be->forward(*st, &ids[size_t(t)], 1, 1, got.data(), {});
      const float* r = ref.data() + size_t(t) * V;
      EXPECT_EQ(top(got.data(), V), top(r, V)) << "position " << t;
      for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(got[size_t(i)]) - r[i]));
    }
    std::printf("[ cuda decode %s ] max |dlogit| %.3g vs cpu-ref\n", what.c_str(), worst);
    EXPECT_LE(worst, decode_bound);
    decode_worst = worst;
  }
  auto be = make_cuda_backend(w);
  auto st = be->new_state(64);
  std::vector<float> got(ref.size());
  be->forward(*st, ids.data(), n, n, got.data(), {});
  double worst = 0;
  int flips = 0;
  for (int t = 0; t < n; ++t) {
    const float* g = got.data() + size_t(t) * V;
    const float* r = ref.data() + size_t(t) * V;
    flips += top(g, V) != top(r, V);
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(g[i]) - r[i]));
  }
  std::printf("[ cuda prefill %s ] max |dlogit| %.3g, top-1 flips %d/%d vs cpu-ref\n", what.c_str(), worst, flips, n);
  EXPECT_LE(worst, 0.15);
  EXPECT_LE(flips, 1);
  return decode_worst;
}

double expect_close_to_reference(const std::shared_ptr<ModelWeights>& w, const std::string& what) {
  return expect_close_to_reference(w, w, what);
}

// The device twin of w (the reference the kernels must meet) and what the bf16 pairs move on the reference path.
std::shared_ptr<ModelWeights> twin_of(const std::shared_ptr<ModelWeights>& w, const std::string& what) {
  int changed = 0;
  auto t = device_twin(w, &changed);
  EXPECT_GT(changed, 0) << what << ": no matrix with non-bf16 scales";
  const auto a = logits_of(w, "cpu-ref"), b = logits_of(t, "cpu-ref");
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  std::printf("[ %s ] %d matrices with bf16 pairs; cpu-ref on them moves max |dlogit| %.3g\n", what.c_str(), changed,
              worst);
  return t;
}

}  // namespace

TEST(CudaFormats, RepackedMlxWidthsMatchTheReferencePath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (QuantChoice c : {QuantChoice{3, 64}, QuantChoice{5, 32}, QuantChoice{6, 64}, QuantChoice{4, 32}}) {
    TempDir d;
    MlxRecipe r;
    r.base = c;
    auto src = load_model(tiny("model-bf16"));
    QuantizeOptions opt;
    opt.recipe = r;
    quantize_checkpoint(*src, tiny("model-bf16"), d / "q", opt);
    expect_close_to_reference(load_model(d / "q"), std::to_string(c.bits) + "-bit group " + std::to_string(c.group));
  }
}

TEST(CudaFormats, Int4RepackedMatchesTheReferencePath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const char* names[] = {"gptq", "awq", "ct-sym", "ct-asym"};
  for (Fmt f : {Fmt::Gptq, Fmt::Awq, Fmt::CtSym, Fmt::CtAsym}) {
    TempDir d;
    write_int4(d.path, f);
    auto w = load_model(d.path);
    const std::string what = names[int(f)];
    auto twin = twin_of(w, what);
    ::testing::internal::CaptureStderr();
    expect_close_to_reference(w, twin, what);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("matrices with zero points"), std::string::npos) << what << ": no kQ4Z upload\n" << log;
  }
}

TEST(CudaFormats, GgufRepackedMatchesTheReferencePath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    TempDir d;
    const std::string path = d / "m.gguf";
    convert_tiny_to_gguf(tiny("model-bf16"), path, {t, false, false});
    ::testing::internal::CaptureStderr();
    auto w = load_model(path);
    ::testing::internal::GetCapturedStderr();
    const std::string what = "gguf " + ggml_type_name(uint32_t(t));
    ::testing::internal::CaptureStderr();
    expect_close_to_reference(w, twin_of(w, what), what);
    const std::string log = ::testing::internal::GetCapturedStderr();
    if (t == GgmlType::Q8_0 || t == GgmlType::Q5_0) {  // zero points 128 / 16: int8 codes q - z, f32 scales
      EXPECT_NE(log.find("affine 8-bit matrices with zero points"), std::string::npos) << what << ": no kI8\n" << log;
    }
  }
}

// The synthetic "small" model (real head sizes) as the Q4_K_M-like GGUF `lily synth --gguf` writes: Q4_K matrices
// (affine 4-bit group 32, f32 scales), Q8_0 where a row is not a whole number of 256-blocks, Q6_K blocks (kQ6: 6-bit
// codes with f32 scales on the device, exact) in some layers. The decode path's own error is larger on these head
// sizes (the GPU measured 0.052 on
// this file, against 0.004-0.016 on the tiny fixture's formats): its bound is that of the same synthetic model in
// MLX 4-bit (bf16 scales, the layout the other bounds were set on), twice its error, at least 5e-2.
TEST(CudaFormats, SynthQ4KMGgufMatchesTheReferencePath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto mlx = make_synthetic("small", 7);
  // measured here, held by the MLX tests on the fixtures (prefill still held to 0.15 / one flip)
  const double base = expect_close_to_reference(mlx, mlx, "synth small mlx-4bit", INFINITY);
  TempDir d;
  const std::string path = d / "small.gguf";
  write_gguf_checkpoint(*mlx, path, make_synthetic_tokenizer(4096, 26).dump());
  ::testing::internal::CaptureStderr();
  auto w = load_model(path);
  ::testing::internal::GetCapturedStderr();
  auto twin = twin_of(w, "synth small Q4_K_M");
  ::testing::internal::CaptureStderr();
  expect_close_to_reference(w, twin, "synth small Q4_K_M", std::max(5e-2, 2 * base));
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("GGUF Q6_K matrices kept as 6-bit codes"), std::string::npos) << log;
}

// FP8 e4m3 with 128x128 block scales (bf16 and f32 scales): kept as e4m3 codes with f32 scales on the device
// (exact), against cpu-ref on the same weights, at the bounds of the other formats.
TEST(CudaFormats, Fp8MatchesTheReferencePath) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (DType sdt : {DType::BF16, DType::F32}) {
    TempDir d;
    write_fp8(d.path, sdt);
    auto w = load_model(d.path);
    int changed = -1;
    device_twin(w, &changed);
    EXPECT_EQ(changed, 0) << "FP8 blocks need no device twin";
    const std::string what = std::string("fp8 ") + dtype_name(sdt) + " scales";
    ::testing::internal::CaptureStderr();
    expect_close_to_reference(w, w, what);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("FP8 matrices kept as e4m3 codes"), std::string::npos) << log;
  }
}

#endif  // LILY_HAVE_CUDA
