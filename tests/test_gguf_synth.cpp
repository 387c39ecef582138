// `lily synth --gguf`: the synthetic "small" model (real head sizes) written as a Q4_K_M-like GGUF and loaded
// back: every matrix within its quantisation's step of the original (a wrong head reorder or layout would
// be off by the weights' own size), vectors exact, the type mix in the load log, the tokenizer intact.
#include <gtest/gtest.h>

#include <cmath>

#include "io/gguf.h"
#include "loader_test_util.h"
#include "synth/gguf_checkpoint.h"
#include "synth/synth_tokenizer.h"
#include "synth/synthetic_model.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

using namespace lily;
using namespace lily_test;

namespace {

// Max over rows of max|a - b| / max|b| (rows of b all zero are skipped).
double rel_err(const QMatrix& a, const QMatrix& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  std::vector<float> x(static_cast<size_t>(a.cols)), y(static_cast<size_t>(a.cols));
  double worst = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    dequant_row(a, r, x.data());
    dequant_row(b, r, y.data());
    double e = 0, m = 0;
    for (size_t j = 0; j < x.size(); ++j) e = std::max(e, std::fabs(double(x[j]) - y[j])), m = std::max(m, std::fabs(double(y[j])));
    if (m > 0) worst = std::max(worst, e / m);
  }
  return worst;
}

}  // namespace

TEST(GgufSynth, SmallPresetRoundTrip) {
  auto w = make_synthetic("small", 7);
  const auto tok_json = make_synthetic_tokenizer(4096, 26).dump();
  TempDir d;
  const std::string path = d / "small.gguf";
  write_gguf_checkpoint(*w, path, tok_json);
  ::testing::internal::CaptureStderr();
  auto g = load_model(path);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("Q4_K -> affine 4-bit"), std::string::npos) << log;
  EXPECT_NE(log.find("Q6_K -> its own blocks"), std::string::npos) << log;
  EXPECT_EQ(log.find("warning"), std::string::npos) << log;
  ASSERT_EQ(g->cfg.n_layers, w->cfg.n_layers);
  EXPECT_EQ(g->cfg.is_full, w->cfg.is_full);
  EXPECT_NE(g->cfg.lin_k_heads, g->cfg.lin_v_heads);
  // Q4_K: half a step of range/15 (+ the 6-bit scale rounding) of the row's 2*max; Q6_K and Q8_0 are finer.
  const double bound = 2.0 / 15 * 0.75;
  double worst = 0;
  auto chk = [&](const QMatrix& a, const QMatrix& b, const std::string& what) {
    const double e = rel_err(a, b);
    EXPECT_LE(e, bound) << what;
    worst = std::max(worst, e);
  };
  chk(g->embed, w->embed, "embed");
  chk(g->lm_head, w->lm_head, "lm_head");
  EXPECT_EQ(g->final_norm, w->final_norm);
  for (size_t i = 0; i < g->layers.size(); ++i) {
    const LayerWeights &x = g->layers[i], &y = w->layers[i];
    const std::string L = "layer " + std::to_string(i) + " ";
    EXPECT_EQ(x.in_norm, y.in_norm);
    if (x.is_full) {
      chk(x.attn.q, y.attn.q, L + "q");
      chk(x.attn.v, y.attn.v, L + "v");
      chk(x.attn.o, y.attn.o, L + "o");
      EXPECT_EQ(x.attn.k_norm, y.attn.k_norm);
    } else {
      chk(x.lin.in_qkv, y.lin.in_qkv, L + "qkv");
      chk(x.lin.in_z, y.lin.in_z, L + "z");
      chk(x.lin.in_a, y.lin.in_a, L + "a");
      chk(x.lin.out, y.lin.out, L + "out");
      EXPECT_EQ(x.lin.conv, y.lin.conv);
      EXPECT_EQ(x.lin.a_neg, y.lin.a_neg);
      EXPECT_EQ(x.lin.dt_bias, y.lin.dt_bias);
    }
    for (size_t e = 0; e < x.moe.gate.e.size(); e += 5) {
      chk(x.moe.gate.e[e], y.moe.gate.e[e], L + "gate");
      chk(x.moe.down.e[e], y.moe.down.e[e], L + "down");
    }
    chk(x.moe.sh_down, y.moe.sh_down, L + "sh_down");
    chk(x.moe.router, y.moe.router, L + "router");
  }
  EXPECT_GT(worst, 0.0);  // the weights really were quantised
  auto from_gguf = gguf_tokenizer(GgufModel(path));
  auto from_json = Tokenizer::from_json_text(tok_json, "synthetic tokenizer.json");
  for (const char* s : {"hello world, the quick brown fox", "<|im_start|>user\nhi<|im_end|>", "  a\n\nzz 12"})
    EXPECT_EQ(from_gguf->encode(s), from_json->encode(s)) << s;
}
