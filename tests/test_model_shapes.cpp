// A checkpoint of other shapes than the tiny fixtures (tests/fixtures/shapes6: 6 layers, hidden 256, 4 query /
// 2 KV heads of 256, 3 key / 6 value DeltaNet heads of 128, 20 experts top-8; made with transformers by
// tools/fixtures/make_fixtures.py with tools/fixtures/presets-other-shapes.json), MLX 4-bit: every CPU backend
// against the transformers reference, teacher-forced over the chat prompt and the last rows of a long prompt.
// Bounds: the exact path top-1 100% and max |dlogit| <= 1e-3; a fast path top-1 >= 97% and mean KL <= 1e-3.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "eval/logit_metrics.h"
#include "eval/teacher_forced.h"
#include "model/weights.h"

using namespace lily;

namespace {

class ShapesModel : public ::testing::TestWithParam<const char*> {};

TEST_P(ShapesModel, MatchesTransformers) {
  const std::string base = std::string(LILY_TEST_DIR) + "/fixtures/shapes6/";
  auto w = load_model(base + "model-mlx-4bit");
  ASSERT_EQ(w->cfg.hidden, 256);
  ReferenceLogits ref = load_reference_logits(base + "reference-mlx-4bit.safetensors");
  const std::string kind = GetParam();
  auto be = make_backend(kind, w);
  const int V = ref.vocab;

  std::vector<float> got = teacher_forced_logits(*be, ref.ids, 64);
  std::vector<int32_t> next(ref.ids.begin() + 1, ref.ids.end());
  LogitComparison c = compare_logits(ref.logits.data(), got.data(), static_cast<int>(ref.ids.size()), V, next);

  ASSERT_GT(ref.long_rows, 0);
  std::vector<float> long_all = teacher_forced_logits(*be, ref.long_ids, 128);
  const size_t skip = (ref.long_ids.size() - ref.long_rows) * static_cast<size_t>(V);
  LogitComparison l = compare_logits(ref.long_logits.data(), long_all.data() + skip, ref.long_rows, V, {});

  std::printf("[ %s ] prompt %d rows: top-1 %.4f, mean KL %.3g, max |dlogit| %.3g; long last %d: top-1 %.4f, "
              "mean KL %.3g, max |dlogit| %.3g\n",
              kind.c_str(), c.positions, c.top1_agreement, c.mean_kl, c.max_abs_err, l.positions,
              l.top1_agreement, l.mean_kl, l.max_abs_err);
  const int rows = c.positions + l.positions;
  const double top1 = (c.top1_agreement * c.positions + l.top1_agreement * l.positions) / rows;
  const double kl = (c.mean_kl * c.positions + l.mean_kl * l.positions) / rows;
  if (kind == "cpu-ref") {
    EXPECT_EQ(top1, 1.0);
    EXPECT_LE(std::max(c.max_abs_err, l.max_abs_err), 1e-3);
  } else {
    EXPECT_GE(top1, 0.97);
    EXPECT_LE(kl, 1e-3);
  }
}

INSTANTIATE_TEST_SUITE_P(Cpu, ShapesModel, ::testing::Values("cpu-ref", "cpu"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
