// load_model on the tiny fixtures: both layouts, values spot-checked against the raw tensors and each other.
#include <gtest/gtest.h>

#include <cmath>

#include "loader_test_util.h"
#include "model/weights.h"

using namespace lily;
using namespace lily_test;

namespace {

std::vector<float> row_of(const QMatrix& m, int64_t r) {
  std::vector<float> v(size_t(m.cols));
  dequant_row(m, r, v.data());
  return v;
}

double correlation(const std::vector<float>& a, const std::vector<float>& b) {
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += a[i], mb += b[i];
  ma /= double(a.size());
  mb /= double(b.size());
  double sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return sab / std::sqrt(saa * sbb);
}

float bf16_at(const TensorView& t, size_t i) {
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(t.data) + 2 * i, 2);
  return bf16_to_f32(h);
}

// Hand decode of one element of an MLX affine tensor (weight U32, scales/biases BF16), independent of dequant_row.
float mlx_hand_decode(const TensorView& w, const TensorView& s, const TensorView& b, int bits, int64_t row, int64_t col) {
  const int64_t words = w.shape.back(), groups = s.shape.back();
  const int64_t per = 32 / bits;
  uint32_t word;
  std::memcpy(&word, static_cast<const uint8_t*>(w.data) + 4 * size_t(row * words + col / per), 4);
  uint32_t q = (word >> (bits * (col % per))) & ((1u << bits) - 1);
  const size_t g = size_t(row * groups + col / 64);
  return bf16_at(s, g) * float(q) + bf16_at(b, g);
}

struct Both : ::testing::Test {
  static std::shared_ptr<ModelWeights> hf, mlx;
  static void SetUpTestSuite() {
    hf = load_model(tiny("model-bf16"));
    mlx = load_model(tiny("model-mlx-4bit"));
  }
  static void TearDownTestSuite() {
    hf.reset();
    mlx.reset();
  }
};
std::shared_ptr<ModelWeights> Both::hf, Both::mlx;

}  // namespace

TEST_F(Both, LayoutsAndStructure) {
  EXPECT_EQ(hf->layout, "hf-bf16");
  EXPECT_EQ(mlx->layout, "mlx-affine");
  for (auto* w : {hf.get(), mlx.get()}) {
    EXPECT_EQ(w->cfg.hidden, 128);
    ASSERT_EQ(w->layers.size(), 4u);
    EXPECT_FALSE(w->keep_alive.empty());
    EXPECT_EQ(w->cfg.eos_ids, std::vector<int>{4098});
    for (int i = 0; i < 4; ++i) {
      const LayerWeights& l = w->layers[size_t(i)];
      EXPECT_EQ(l.is_full, i == 3);
      EXPECT_EQ(l.moe.gate.e.size(), 16u);
      EXPECT_EQ(l.moe.down.e.size(), 16u);
      if (!l.is_full) {
        EXPECT_EQ(l.lin.conv.size(), 256u * 4);
        EXPECT_EQ(l.lin.in_qkv.rows, 256);
        EXPECT_EQ(l.lin.norm.size(), 32u);
      } else {
        EXPECT_EQ(l.attn.q.rows, 512);
        EXPECT_EQ(l.attn.o.cols, 256);
      }
    }
  }
  const QMatrix& he = hf->embed;
  EXPECT_EQ(he.kind, QMatrix::Kind::Dense);
  EXPECT_EQ(he.row_bytes(), 256u);
  EXPECT_EQ(he.bytes(), 4160u * 256);
  const QMatrix& me = mlx->embed;
  EXPECT_EQ(me.kind, QMatrix::Kind::Affine);
  EXPECT_EQ(me.bits, 4);
  EXPECT_EQ(me.group, 64);
  EXPECT_EQ(me.row_bytes(), 64u);
  EXPECT_EQ(me.bytes(), 4160u * 64 + 2u * 4160 * 2 * 2);
  EXPECT_EQ(mlx->layers[0].moe.router.bits, 8);  // per-module override
  EXPECT_EQ(mlx->layers[3].moe.sh_gate_w.bits, 8);
  EXPECT_EQ(mlx->layers[3].moe.sh_gate.bits, 4);
  EXPECT_EQ(mlx->layers[0].moe.down.e[5].cols, 64);
}

TEST_F(Both, HfValuesMatchRawTensors) {
  CheckpointFiles f(tiny("model-bf16"));
  const TensorView& emb = f.get("model.language_model.embed_tokens.weight");
  auto r = row_of(hf->embed, 4000);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(r[size_t(j)], bf16_at(emb, size_t(4000 * 128 + j)));
  const TensorView& n = f.get("model.language_model.layers.2.input_layernorm.weight");
  for (size_t j = 0; j < 128; ++j) EXPECT_EQ(hf->layers[2].in_norm[j], bf16_at(n, j) + 1.0f);  // +1 folded
  const TensorView& ln = f.get("model.language_model.layers.1.linear_attn.norm.weight");
  for (size_t j = 0; j < 32; ++j) EXPECT_EQ(hf->layers[1].lin.norm[j], bf16_at(ln, j));  // never +1
  const TensorView& al = f.get("model.language_model.layers.0.linear_attn.A_log");
  for (size_t h = 0; h < 4; ++h) EXPECT_FLOAT_EQ(hf->layers[0].lin.a_neg[h], -std::exp(bf16_at(al, h)));
  const TensorView& cv = f.get("model.language_model.layers.0.linear_attn.conv1d.weight");
  for (size_t i = 0; i < 1024; ++i) EXPECT_EQ(hf->layers[0].lin.conv[i], bf16_at(cv, i));
  // Fused experts: gate = rows [0, I), up = rows [I, 2I) of gate_up [E, 2I, H]; down [E, H, I].
  const TensorView& gu = f.get("model.language_model.layers.3.mlp.experts.gate_up_proj");
  const TensorView& dn = f.get("model.language_model.layers.3.mlp.experts.down_proj");
  const MoeWeights& m = hf->layers[3].moe;
  for (int e : {0, 7, 15}) {
    auto g = row_of(m.gate.e[size_t(e)], 5), u = row_of(m.up.e[size_t(e)], 5), d = row_of(m.down.e[size_t(e)], 100);
    for (int j = 0; j < 128; ++j) {
      EXPECT_EQ(g[size_t(j)], bf16_at(gu, size_t((e * 128 + 5) * 128 + j)));
      EXPECT_EQ(u[size_t(j)], bf16_at(gu, size_t((e * 128 + 64 + 5) * 128 + j)));
    }
    for (int j = 0; j < 64; ++j) EXPECT_EQ(d[size_t(j)], bf16_at(dn, size_t((e * 128 + 100) * 64 + j)));
  }
}

TEST_F(Both, MlxDequantMatchesHandDecode) {
  CheckpointFiles f(tiny("model-mlx-4bit"));
  auto check = [&](const QMatrix& m, const std::string& mod, int bits, int64_t row, int64_t stacked_row) {
    const TensorView& w = f.get(mod + ".weight");
    const TensorView& s = f.get(mod + ".scales");
    const TensorView& b = f.get(mod + ".biases");
    auto r = row_of(m, row);
    for (int64_t j = 0; j < m.cols; ++j)
      ASSERT_EQ(r[size_t(j)], mlx_hand_decode(w, s, b, bits, stacked_row, j)) << mod << " col " << j;
  };
  check(mlx->embed, "language_model.model.embed_tokens", 4, 1234, 1234);
  check(mlx->lm_head, "language_model.lm_head", 4, 4159, 4159);
  check(mlx->layers[1].moe.router, "language_model.model.layers.1.mlp.gate", 8, 9, 9);
  check(mlx->layers[3].moe.sh_gate_w, "language_model.model.layers.3.mlp.shared_expert_gate", 8, 0, 0);
  check(mlx->layers[3].attn.o, "language_model.model.layers.3.self_attn.o_proj", 4, 77, 77);
  // Stacked experts: expert e row r is row e*rows + r of the flattened tensor.
  check(mlx->layers[2].moe.up.e[11], "language_model.model.layers.2.mlp.switch_mlp.up_proj", 4, 3, 11 * 64 + 3);
  check(mlx->layers[2].moe.down.e[4], "language_model.model.layers.2.mlp.switch_mlp.down_proj", 4, 120, 4 * 128 + 120);
}

TEST_F(Both, MlxIsAQuantisationOfTheSameWeights) {
  for (int64_t tok : {0, 1, 500, 4097, 4159}) {
    EXPECT_GT(correlation(row_of(hf->embed, tok), row_of(mlx->embed, tok)), 0.9) << tok;
    EXPECT_GT(correlation(row_of(hf->lm_head, tok), row_of(mlx->lm_head, tok)), 0.9) << tok;
  }
  EXPECT_GT(correlation(row_of(hf->layers[0].moe.router, 3), row_of(mlx->layers[0].moe.router, 3)), 0.99);  // 8-bit
  EXPECT_GT(correlation(row_of(hf->layers[1].moe.gate.e[9], 2), row_of(mlx->layers[1].moe.gate.e[9], 2)), 0.9);
  EXPECT_GT(correlation(row_of(hf->layers[1].moe.down.e[9], 2), row_of(mlx->layers[1].moe.down.e[9], 2)), 0.9);
  EXPECT_GT(correlation(row_of(hf->layers[3].attn.q, 300), row_of(mlx->layers[3].attn.q, 300)), 0.9);
  // Norms: MLX has +1 folded (then rounded to bf16); HF's were folded at load in f32.
  auto near = [](const std::vector<float>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], std::fabs(b[i]) * (1.0f / 128) + 1e-6f) << what << " " << i;
  };
  near(mlx->final_norm, hf->final_norm, "final_norm");
  for (int i = 0; i < 4; ++i) {
    near(mlx->layers[size_t(i)].in_norm, hf->layers[size_t(i)].in_norm, "in_norm");
    near(mlx->layers[size_t(i)].post_norm, hf->layers[size_t(i)].post_norm, "post_norm");
  }
  near(mlx->layers[3].attn.q_norm, hf->layers[3].attn.q_norm, "q_norm");
  near(mlx->layers[3].attn.k_norm, hf->layers[3].attn.k_norm, "k_norm");
  // Unquantised, un-folded small tensors are identical.
  EXPECT_EQ(mlx->layers[1].lin.norm, hf->layers[1].lin.norm);
  EXPECT_EQ(mlx->layers[1].lin.conv, hf->layers[1].lin.conv);
  EXPECT_EQ(mlx->layers[1].lin.dt_bias, hf->layers[1].lin.dt_bias);
  EXPECT_EQ(mlx->layers[1].lin.a_neg, hf->layers[1].lin.a_neg);
}
