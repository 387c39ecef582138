// Every MLX affine variant: the tiny BF16 fixture quantised (quant/affine_quant, written as MLX writes) at bits
// 2, 3, 4, 5, 6, 8 and group sizes 32, 64, 128, and a mixed recipe. The loaded model runs on the reference path
// with exactly the logits of its dequantised weights, and on the fast path within its bounds; widths other than
// 4 and 8 are repacked to 8-bit codes at load and the load log says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "quant/quantize_checkpoint.h"
#include "quant_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

std::shared_ptr<ModelWeights> quantised(const std::string& dir, const MlxRecipe& r) {
  auto src = load_model(tiny("model-bf16"));
  QuantizeOptions opt;
  opt.recipe = r;
  quantize_checkpoint(*src, tiny("model-bf16"), dir, opt);
  return load_model(dir);
}

// max |dequant(q) - source| / scale over a matrix's elements (<= 1: within one quantisation step)
double steps_off(const QMatrix& q, const QMatrix& src) {
  std::vector<float> a(size_t(q.cols)), b(size_t(q.cols));
  double worst = 0;
  for (int64_t r = 0; r < q.rows; ++r) {
    dequant_row(q, r, a.data());
    dequant_row(src, r, b.data());
    for (int64_t c = 0; c < q.cols; ++c) {
      const double s = decode_scalar(q.scales, q.sdtype, size_t(r * (q.cols / q.group) + c / q.group));
      worst = std::max(worst, std::fabs(double(a[size_t(c)]) - b[size_t(c)]) / s);
    }
  }
  return worst;
}

void check_model(const std::shared_ptr<ModelWeights>& q, const std::string& what) {
  SCOPED_TRACE(what);
  const auto ref = logits_of(dequantised_copy(q), "cpu-ref");
  EXPECT_TRUE(same_bits(logits_of(q, "cpu-ref"), ref)) << "reference path: not the dequantised weights' logits";
  const auto fast = logits_of(q, "cpu");
  const int V = q->cfg.vocab, n = int(fast.size()) / V;
  double worst = 0;
  for (int t = 0; t < n; ++t) {
    const float* a = fast.data() + size_t(t) * V;
    const float* b = ref.data() + size_t(t) * V;
    EXPECT_EQ(std::max_element(a, a + V) - a, std::max_element(b, b + V) - b) << "top-1 at position " << t;
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  EXPECT_LE(worst, 2e-2) << "fast path";  // the bound of the tiny-model tests (4-bit x int8 activations)
}

}  // namespace

class MlxWidths : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(MlxWidths, LoadAndRunExactly) {
  const auto [bits, group] = GetParam();
  TempDir d;
  MlxRecipe r;
  r.base = {bits, group};
  r.gates = {bits, group};
  if (group == 128)  // the tiny model's down projections have 64 inputs: group 64 there (MLX needs cols % group == 0)
    for (int l = 0; l < 4; ++l)
      for (const char* m : {".mlp.switch_mlp.down_proj", ".mlp.shared_expert.down_proj"})
        r.modules["language_model.model.layers." + std::to_string(l) + m] = {bits, 64};
  auto q = quantised(d / "q", r);
  auto src = load_model(tiny("model-bf16"));
  EXPECT_EQ(q->layout, "mlx-affine");
  const bool repacked = bits != 4 && bits != 8;
  EXPECT_EQ(has_note(*q, "repacked"), repacked);
  if (repacked) {
    EXPECT_TRUE(has_note(*q, "MLX affine " + std::to_string(bits) + "-bit codes to 8-bit codes"));
  }
  for_each_matrix(*q, [&](QMatrix& m) {
    EXPECT_EQ(m.kind, QMatrix::Kind::Affine);
    EXPECT_EQ(m.bits, repacked ? 8 : bits);
    EXPECT_EQ(m.group, m.cols % group ? 64 : group);
  });
  EXPECT_LE(steps_off(q->layers[0].lin.in_qkv, src->layers[0].lin.in_qkv), 1.0);
  EXPECT_LE(steps_off(q->layers[3].moe.down.e[5], src->layers[3].moe.down.e[5]), 1.0);
  EXPECT_LE(steps_off(q->lm_head, src->lm_head), 1.0);
  check_model(q, std::to_string(bits) + "-bit group " + std::to_string(group));
}

INSTANTIATE_TEST_SUITE_P(All, MlxWidths, ::testing::Combine(::testing::Values(2, 3, 4, 5, 6, 8), ::testing::Values(32, 64, 128)),
                         [](const auto& info) {
                           std::string s = "b";  // appended: GCC 12 -Wrestrict misfires on "b" + std::string
                           s += std::to_string(std::get<0>(info.param));
                           s += "_g";
                           s += std::to_string(std::get<1>(info.param));
                           return s;
                         });

TEST(MlxWidths, MixedRecipeWithPerModuleOverrides) {
  TempDir d;
  MlxRecipe r;  // 4-bit g64, routers 8-bit, plus overrides as mixed recipes write them
  r.modules["language_model.model.embed_tokens"] = {6, 64};
  r.modules["language_model.lm_head"] = {8, 32};
  r.modules["language_model.model.layers.3.self_attn.q_proj"] = {5, 128};
  r.modules["language_model.model.layers.0.mlp.switch_mlp.down_proj"] = {3, 32};
  auto q = quantised(d / "q", r);
  const auto cfg = nlohmann::json::parse(read_text(d / "q/config.json"));
  EXPECT_EQ(cfg["quantization"]["language_model.lm_head"], nlohmann::json({{"group_size", 32}, {"bits", 8}}));
  EXPECT_EQ(cfg["quantization"]["language_model.model.layers.0.mlp.gate"], nlohmann::json({{"group_size", 64}, {"bits", 8}}));
  EXPECT_EQ(q->embed.bits, 8);  // 6-bit repacked
  EXPECT_EQ(q->lm_head.group, 32);
  EXPECT_EQ(q->layers[3].attn.q.group, 128);
  EXPECT_EQ(q->layers[3].attn.k.bits, 4);
  EXPECT_EQ(q->layers[0].moe.down.e[0].bits, 8);
  EXPECT_EQ(q->layers[1].moe.down.e[0].bits, 4);
  EXPECT_TRUE(has_note(*q, "MLX affine 3-bit"));
  EXPECT_TRUE(has_note(*q, "MLX affine 5-bit"));
  EXPECT_TRUE(has_note(*q, "MLX affine 6-bit"));
  check_model(q, "mixed");
}

TEST(MlxWidths, OtherModesAreClearErrors) {
  for (const char* mode : {"mxfp4", "nvfp4", "mxfp8"}) {
    TempDir d;
    for (const auto& e : fs::directory_iterator(tiny("model-mlx-4bit")))
      fs::copy_file(e.path(), d / e.path().filename().string());
    auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
    cfg["quantization"]["mode"] = mode;
    cfg["quantization_config"]["mode"] = mode;
    write_text(d / "config.json", cfg.dump());
    EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }),
                         std::string("unsupported quantisation mode \"") + mode + "\" in quantization"))
        << mode;
  }
}
