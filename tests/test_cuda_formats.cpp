// The CUDA backend on the formats repacked at load (MLX 3/5/6-bit -> 8-bit codes, group 32 and 128) against the
// reference CPU path on the same weights, and its clear refusal of FP8 and of GPTQ / AWQ int4 (f32 scales).
// Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA

#include <algorithm>
#include <cmath>

#include "cuda/cuda_factory.h"
#include "loader_test_util.h"
#include "quant/quantize_checkpoint.h"
#include "quant_fixture_writers.h"
#include "quant_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

// Prompt token by token through the decode step (as test_cuda_model.cpp holds it to 5e-2) vs cpu-ref.
void expect_close_to_reference(const std::shared_ptr<ModelWeights>& w, const std::string& what) {
  SCOPED_TRACE(what);
  const std::vector<int32_t> ids = {1, 17, 4000, 256, 3, 99, 1024, 7, 4095, 12};
  const auto ref = logits_of(w, "cpu-ref", ids);
  setenv("LILY_CUDA_PREFILL", "decode", 1);
  auto be = make_cuda_backend(w);
  unsetenv("LILY_CUDA_PREFILL");
  const int V = w->cfg.vocab, n = int(ids.size());
  auto st = be->new_state(64);
  std::vector<float> got(static_cast<size_t>(V));
  double worst = 0;
  for (int t = 0; t < n; ++t) {
    be->forward(*st, &ids[size_t(t)], 1, 1, got.data(), {});
    const float* r = ref.data() + size_t(t) * V;
    EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(), std::max_element(r, r + V) - r) << "position " << t;
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(got[size_t(i)]) - r[i]));
  }
  EXPECT_LE(worst, 5e-2);
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

// GPTQ / AWQ repacked to affine 4-bit with f32 scales gave wrong logits on this backend (top-1 differed at 3 of
// 10 positions, max |dlogit| 2.18 against cpu-ref): until that is found, the backend refuses them.
TEST(CudaFormats, Int4RepackedIsAClearError) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  for (Fmt f : {Fmt::Gptq, Fmt::Awq}) {
    TempDir d;
    write_int4(d.path, f);
    const std::string err = error_of([&] { make_cuda_backend(load_model(d.path)); });
    EXPECT_TRUE(contains(err, "weights with f32 scales (GPTQ, AWQ or compressed-tensors int4, or GGUF, repacked at "
                              "load) are not supported by the CUDA backend")) << err;
  }
}

TEST(CudaFormats, Fp8IsAClearError) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  TempDir d;
  write_fp8(d.path, DType::BF16);
  const std::string err = error_of([&] { make_cuda_backend(load_model(d.path)); });
  EXPECT_TRUE(contains(err, "FP8 e4m3 128x128 blocks weights are not supported by the CUDA backend")) << err;
}

#endif  // LILY_HAVE_CUDA
