#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "app/make_backend.h"
#include "core/error.h"
#include "engine/backend.h"
#include "finite_forward_check.h"
#include "io/safetensors.h"
#include "synth/checkpoint_writer.h"
#include "synth/module_plan.h"
#include "synth/presets.h"
#include "synth/synth_tokenizer.h"
#include "synth/synthetic_model.h"
#include "tokenizer/tokenizer.h"

using namespace lily;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path p = fs::temp_directory_path() / ("lily_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  return p;
}

bool same_bytes(const QMatrix& a, const QMatrix& b) {
  if (a.rows != b.rows || a.cols != b.cols || a.bits != b.bits) return false;
  size_t wb = size_t(a.rows) * size_t(a.cols) * size_t(a.bits) / 8;
  size_t sb = size_t(a.rows) * size_t(a.cols / a.group) * 2;
  return !std::memcmp(a.w, b.w, wb) && !std::memcmp(a.scales, b.scales, sb) && !std::memcmp(a.biases, b.biases, sb);
}

// Bytes and shape of one tensor of a safetensors file.
struct Raw {
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape;
  DType dtype;
};
Raw read_tensor(const fs::path& file, const std::string& name) {
  auto f = SafetensorsFile::open(file.string());
  const TensorView* t = f->find(name);
  if (!t) throw Error(file.string() + ": no tensor " + name);
  const auto* p = static_cast<const uint8_t*>(t->data);
  return {std::vector<uint8_t>(p, p + t->nbytes), t->shape, t->dtype};
}

}  // namespace

TEST(Synth, PresetShapes) {
  auto c = make_synthetic_config("qwen3.6-35b-a3b");
  EXPECT_EQ(c.hidden, 2048);
  EXPECT_EQ(c.n_layers, 40);
  EXPECT_EQ(c.vocab, 248320);
  EXPECT_EQ(c.n_experts, 256);
  EXPECT_EQ(c.top_k, 8);
  EXPECT_EQ(c.conv_dim(), 8192);
  EXPECT_EQ(c.q_proj_rows(), 8192);
  EXPECT_EQ(c.rope_dim, 64);
  int full = 0;
  for (bool f : c.is_full) full += f;
  EXPECT_EQ(full, 10);
  EXPECT_TRUE(c.is_full[3] && c.is_full[39] && !c.is_full[0]);
  // MLX 4-bit size of the real model: ~19.5 GB of weights (excluding the tiny f32 vectors).
  uint64_t bytes = 0;
  for (const auto& m : plan_modules(c)) bytes += m.w_bytes() + 2 * m.sb_bytes();
  EXPECT_GT(bytes, 19'000'000'000ull);
  EXPECT_LT(bytes, 20'000'000'000ull);
  EXPECT_THROW(make_synthetic_config("nope"), Error);
}

TEST(Synth, TinyModelValidAndDeterministic) {
  auto a = make_synthetic("tiny", 7);
  auto b = make_synthetic("tiny", 7);
  auto c = make_synthetic("tiny", 8);
  const auto& cfg = a->cfg;
  ASSERT_EQ(a->layers.size(), 4u);
  EXPECT_EQ(a->layout, "mlx-affine");
  EXPECT_TRUE(a->embed.valid());
  EXPECT_EQ(a->lm_head.rows, cfg.vocab);
  for (int i = 0; i < cfg.n_layers; ++i) {
    const auto& L = a->layers[size_t(i)];
    EXPECT_EQ(L.is_full, cfg.is_full[size_t(i)]);
    EXPECT_EQ(L.moe.router.bits, 8);
    EXPECT_EQ(L.moe.sh_gate_w.bits, 8);
    EXPECT_EQ(L.moe.sh_gate_w.rows, 1);
    ASSERT_EQ(L.moe.gate.e.size(), size_t(cfg.n_experts));
    EXPECT_EQ(L.moe.down.e[3].rows, cfg.hidden);
    EXPECT_EQ(L.moe.down.e[3].cols, cfg.expert_inter);
    EXPECT_EQ(L.in_norm.size(), size_t(cfg.hidden));
    if (L.is_full) {
      EXPECT_EQ(L.attn.q.rows, cfg.q_proj_rows());
      EXPECT_EQ(L.attn.q_norm.size(), size_t(cfg.head_dim));
    } else {
      EXPECT_EQ(L.lin.in_qkv.rows, cfg.conv_dim());
      EXPECT_EQ(L.lin.conv.size(), size_t(cfg.conv_dim() * cfg.conv_kernel));
      for (float x : L.lin.a_neg) EXPECT_TRUE(x <= -1.0f && x >= -16.0f);
      for (float x : L.lin.dt_bias) EXPECT_TRUE(x < -2.0f && x > -7.5f);  // softplus(dt_bias) in [1e-3, 0.1]
    }
  }
  for (const auto& m : plan_modules(cfg))
    for (int e = 0; e < m.count; ++e) {
      EXPECT_TRUE(same_bytes(slot_matrix(*a, m, e), slot_matrix(*b, m, e))) << m.name;
      EXPECT_FALSE(same_bytes(slot_matrix(*a, m, e), slot_matrix(*c, m, e))) << m.name;
    }
  EXPECT_EQ(a->final_norm, b->final_norm);
  EXPECT_NE(a->final_norm, c->final_norm);
  EXPECT_GT(model_weight_bytes(*a), 0u);
}

TEST(Synth, WeightStatistics) {
  // Dequantised weights: mean ~0 and std ~gain/sqrt(cols).
  auto w = make_synthetic("small", 1);
  const QMatrix& q = w->layers[0].lin.in_qkv;
  const auto* words = static_cast<const uint32_t*>(q.w);
  const auto* s = static_cast<const uint16_t*>(q.scales);
  const auto* b = static_cast<const uint16_t*>(q.biases);
  double sum = 0, sq = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < 64; ++r)
    for (int64_t c = 0; c < q.cols; ++c) {
      uint32_t v = (words[r * q.cols / 8 + c / 8] >> (4 * (c % 8))) & 15;
      int64_t g = r * (q.cols / 64) + c / 64;
      double x = bf16_to_f32(s[g]) * double(v) + bf16_to_f32(b[g]);
      sum += x;
      sq += x * x;
      ++n;
    }
  double mean = sum / double(n), sd = std::sqrt(sq / double(n) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(sd * std::sqrt(double(q.cols)), 1.0, 0.1);
}

TEST(Synth, TokenizerJson) {
  auto t = make_synthetic_tokenizer(4096, 33);
  EXPECT_EQ(t["model"]["vocab"].size(), 4096u);
  EXPECT_EQ(t["model"]["merges"].size(), 4096u - 256u);
  EXPECT_EQ(t["added_tokens"].size(), 33u);
  EXPECT_EQ(t["added_tokens"][0]["id"], 4096);
  EXPECT_EQ(t["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(t["added_tokens"][2]["content"], "<|im_end|>");
  EXPECT_EQ(t["added_tokens"][24]["content"], "<think>");  // 248044 + 24 = 248068 in the real vocabulary
  // Every merge's parts and result are in the vocabulary; ids are unique.
  std::set<int> ids;
  for (auto it = t["model"]["vocab"].begin(); it != t["model"]["vocab"].end(); ++it) ids.insert(it.value().get<int>());
  EXPECT_EQ(ids.size(), 4096u);
  for (const auto& m : t["model"]["merges"]) {
    std::string l = m[0], r = m[1];
    EXPECT_TRUE(t["model"]["vocab"].contains(l) && t["model"]["vocab"].contains(r) && t["model"]["vocab"].contains(l + r));
  }
}

TEST(Synth, MlxCheckpointRoundTrip) {
  auto w = make_synthetic("tiny", 3);
  auto dir = temp_dir("synth_mlx");
  CheckpointOptions opt;
  opt.max_shard_bytes = 600'000;  // force several shards
  opt.bpe_vocab = synthetic_bpe_vocab("tiny");
  write_checkpoint(*w, dir.string(), opt);
  std::ifstream idx(dir / "model.safetensors.index.json");
  auto index = nlohmann::json::parse(idx);
  std::set<std::string> shards;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) shards.insert(it.value());
  EXPECT_GT(shards.size(), 1u);
  std::ifstream cf(dir / "config.json");
  auto cfg = nlohmann::json::parse(cf);
  EXPECT_EQ(cfg["text_config"]["hidden_size"], 128);
  EXPECT_EQ(cfg["quantization"]["bits"], 4);
  EXPECT_EQ(cfg["quantization"]["language_model.model.layers.2.mlp.gate"]["bits"], 8);
  EXPECT_EQ(cfg["quantization"]["language_model.model.layers.2.mlp.shared_expert_gate"]["bits"], 8);
  EXPECT_TRUE(fs::exists(dir / "tokenizer.json"));

  auto get = [&](const std::string& name) { return read_tensor(dir / index["weight_map"][name].get<std::string>(), name); };
  // Every matrix: .weight/.scales/.biases bytes equal the in-memory ones (experts stacked along axis 0).
  for (const auto& m : plan_modules(w->cfg)) {
    auto wt = get(m.name + ".weight").bytes;
    auto sc = get(m.name + ".scales").bytes;
    auto bi = get(m.name + ".biases").bytes;
    size_t wb = size_t(m.rows) * size_t(m.cols) * size_t(m.bits) / 8, sb = size_t(m.rows) * size_t(m.cols / 64) * 2;
    ASSERT_EQ(wt.size(), wb * size_t(m.count)) << m.name;
    for (int e = 0; e < m.count; ++e) {
      const QMatrix& q = slot_matrix(*w, m, e);
      EXPECT_EQ(0, std::memcmp(wt.data() + size_t(e) * wb, q.w, wb)) << m.name;
      EXPECT_EQ(0, std::memcmp(sc.data() + size_t(e) * sb, q.scales, sb)) << m.name;
      EXPECT_EQ(0, std::memcmp(bi.data() + size_t(e) * sb, q.biases, sb)) << m.name;
    }
  }
  // Vectors round-trip (norms exactly, A_log to float precision).
  for (const auto& v : plan_vectors(w->cfg)) {
    auto t = get(v.name);
    EXPECT_EQ(t.shape, v.shape) << v.name;
    const auto& mem = slot_vector(*w, v);
    if (v.slot == VecSlot::ALog) {
      ASSERT_EQ(t.dtype, DType::F32);
      std::vector<float> a(t.bytes.size() / 4);
      std::memcpy(a.data(), t.bytes.data(), t.bytes.size());
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(-std::exp(a[i]), mem[i], 1e-5f * std::fabs(mem[i]));
    } else {
      const auto& raw = t.bytes;
      ASSERT_EQ(raw.size(), mem.size() * 2);
      for (size_t i = 0; i < mem.size(); ++i) {
        uint16_t h;
        std::memcpy(&h, raw.data() + 2 * i, 2);
        EXPECT_EQ(bf16_to_f32(h), mem[i]) << v.name;
      }
    }
  }
  fs::remove_all(dir);
}

TEST(Synth, HfCheckpointLayout) {
  auto w = make_synthetic("tiny", 3);
  auto dir = temp_dir("synth_hf");
  CheckpointOptions opt;
  opt.layout = "hf-bf16";
  opt.bpe_vocab = 4096;
  write_checkpoint(*w, dir.string(), opt);
  std::ifstream idx(dir / "model.safetensors.index.json");
  auto index = nlohmann::json::parse(idx);
  const auto& map = index["weight_map"];
  EXPECT_TRUE(map.contains("lm_head.weight"));
  EXPECT_TRUE(map.contains("model.language_model.embed_tokens.weight"));
  EXPECT_TRUE(map.contains("model.language_model.layers.0.mlp.experts.gate_up_proj"));
  EXPECT_TRUE(map.contains("model.language_model.layers.3.self_attn.q_proj.weight"));
  std::ifstream cf(dir / "config.json");
  EXPECT_FALSE(nlohmann::json::parse(cf).contains("quantization"));
  const std::string gu = "model.language_model.layers.0.mlp.experts.gate_up_proj";
  EXPECT_EQ(read_tensor(dir / map[gu].get<std::string>(), gu).shape, (std::vector<int64_t>{16, 128, 128}));
  // Zero-centred norms are stored as w - 1.
  const std::string n = "model.language_model.layers.0.input_layernorm.weight";
  auto raw = read_tensor(dir / map[n].get<std::string>(), n).bytes;
  uint16_t h;
  std::memcpy(&h, raw.data(), 2);
  EXPECT_EQ(bf16_to_f32(h) + 1.0f, w->layers[0].in_norm[0]);
  fs::remove_all(dir);
}

TEST(Synth, LoadModelReadsWhatSynthWrote) {
  for (std::string layout : {"mlx-4bit", "hf-bf16"}) {
    auto w = make_synthetic("tiny", 11);
    auto dir = temp_dir("synth_load_" + layout);
    CheckpointOptions opt;
    opt.layout = layout;
    opt.max_shard_bytes = 700'000;
    opt.bpe_vocab = 4096;
    write_checkpoint(*w, dir.string(), opt);
    auto l = load_model(dir.string());
    auto tok = Tokenizer::load((dir / "tokenizer.json").string());
    auto ids = tok->encode("hello world<|im_end|>");
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.back(), 4096 + 2);  // <|im_end|> at bpe_vocab + 2
    for (auto id : ids) EXPECT_LT(id, l->cfg.vocab);
    EXPECT_EQ(l->cfg.hidden, w->cfg.hidden);
    EXPECT_EQ(l->cfg.is_full, w->cfg.is_full);
    EXPECT_EQ(l->cfg.vocab, w->cfg.vocab);
    EXPECT_EQ(l->cfg.rope_dim, w->cfg.rope_dim);
    EXPECT_EQ(l->cfg.top_k, w->cfg.top_k);
    for (const auto& v : plan_vectors(w->cfg)) {
      const auto& a = slot_vector(*w, v);
      const auto& b = slot_vector(*l, v);
      ASSERT_EQ(a.size(), b.size()) << v.name;
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f * std::fabs(a[i])) << v.name;
    }
    std::vector<float> ra(size_t(w->cfg.hidden)), rb(ra.size());
    for (const auto& m : plan_modules(w->cfg)) {
      for (int e = 0; e < m.count; ++e) {
        const QMatrix& a = slot_matrix(*w, m, e);
        const QMatrix& b = slot_matrix(*l, m, e);
        if (layout == "mlx-4bit") {
          EXPECT_TRUE(same_bytes(a, b)) << m.name << " expert " << e;
          continue;
        }
        // hf-bf16: the dense BF16 matrix equals the dequantised 4-bit one (rounded to BF16).
        ASSERT_EQ(b.kind, QMatrix::Kind::Dense) << m.name;
        std::vector<float> da(size_t(a.cols)), db(size_t(a.cols));
        for (int64_t r = 0; r < a.rows; r += std::max<int64_t>(1, a.rows / 7)) {
          dequant_row(a, r, da.data());
          dequant_row(b, r, db.data());
          for (size_t c = 0; c < da.size(); ++c) ASSERT_EQ(bf16_to_f32(f32_to_bf16(da[c])), db[c]) << m.name;
        }
      }
    }
    fs::remove_all(dir);
  }
}

TEST(Synth, TinyForwardIsFinite) {
  auto w = make_synthetic("tiny", 5);
  expect_finite_varied_logits(w);
}
