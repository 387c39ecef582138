// Name variants: text-only Qwen3_5MoeForCausalLM checkpoints (model.layers.*, model.embed_tokens.weight), MTP
// tensors (mtp.*, language_model.mtp.*) listed and skipped without warnings, vision tensors skipped.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "quant_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

OwnedTensor bf16_zeros(const std::string& name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, DType::BF16, std::move(shape), std::vector<uint8_t>(size_t(n) * 2, 0)};
}

}  // namespace

TEST(LoaderNames, TextOnlyCausalLmWithMtp) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    std::vector<OwnedTensor> out;
    for (auto& t : ts) {
      if (t.name.rfind("model.visual.", 0) == 0) continue;  // a text-only fine-tune has no vision tower
      if (t.name.rfind("mtp.", 0) == 0) continue;           // the fixture's own MTP block: two stand-ins below
      const std::string pre = "model.language_model.";
      if (t.name.rfind(pre, 0) == 0) t.name = "model." + t.name.substr(pre.size());
      out.push_back(std::move(t));
    }
    out.push_back(bf16_zeros("mtp.fc.weight", {128, 256}));
    out.push_back(bf16_zeros("mtp.layers.0.input_layernorm.weight", {128}));
    ts = std::move(out);
  });
  auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
  nlohmann::json flat = cfg["text_config"];  // Qwen3_5MoeForCausalLM: the text config at the top level
  flat["architectures"] = {"Qwen3_5MoeForCausalLM"};
  write_text(d / "config.json", flat.dump());
  testing::internal::CaptureStderr();
  auto w = load_model(d.path);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(contains(err, "warning")) << err;
  EXPECT_EQ(w->layout, "hf-text");
  EXPECT_EQ(w->mtp_tensors, (std::vector<std::string>{"mtp.fc.weight", "mtp.layers.0.input_layernorm.weight"}));
  EXPECT_EQ(w->checkpoint->get("mtp.fc.weight").shape, (std::vector<int64_t>{128, 256}));
  EXPECT_TRUE(has_note(*w, "2 multi-token-prediction tensor(s)"));
  auto ref = load_model(tiny("model-bf16"));
  EXPECT_TRUE(same_bits(logits_of(w, "cpu-ref"), logits_of(ref, "cpu-ref")));
}

TEST(LoaderNames, MlxLanguageModelMtpAndVisionSkippedSilently) {
  TempDir d;
  rewrite_checkpoint(tiny("model-mlx-4bit"), d.path, [](std::vector<OwnedTensor>& ts) {
    ts.push_back(bf16_zeros("language_model.mtp.fc.weight", {128, 256}));
    ts.push_back(bf16_zeros("vision_tower.extra_head.weight", {64}));
  });
  testing::internal::CaptureStderr();
  auto w = load_model(d.path);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(contains(err, "warning")) << err;
  EXPECT_EQ(w->mtp_tensors, std::vector<std::string>{"language_model.mtp.fc.weight"});
}

TEST(LoaderNames, UnknownLayoutNamesAllThree) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name == "model.language_model.embed_tokens.weight") t.name = "transformer.wte.weight";
  });
  const std::string e = error_of([&] { load_model(d.path); });
  EXPECT_TRUE(contains(e, "'model.embed_tokens.weight' (Hugging Face text-only)")) << e;
  EXPECT_TRUE(contains(e, "'language_model.model.embed_tokens.weight' (MLX)")) << e;
}
