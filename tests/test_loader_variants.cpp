// Checkpoint variants made from the fixtures with the writer: per-expert HF tensors, F32 small tensors,
// unquantised modules inside an MLX checkpoint, tied embeddings; and every load error's message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "model/weights.h"

using namespace lily;
using namespace lily_test;

namespace {

const std::string kHf = "model.language_model.layers.";
const std::string kMlx = "language_model.model.layers.";

std::vector<float> row_of(const QMatrix& m, int64_t r) {
  std::vector<float> v(size_t(m.cols));
  dequant_row(m, r, v.data());
  return v;
}

// Bytes of rows [r0, r0+n) of a row-major tensor with `cols` elements of `es` bytes per row.
std::vector<uint8_t> rows(const OwnedTensor& t, int64_t r0, int64_t n, int64_t cols, size_t es) {
  auto b = t.bytes.begin() + std::ptrdiff_t(size_t(r0 * cols) * es);
  return std::vector<uint8_t>(b, b + std::ptrdiff_t(size_t(n * cols) * es));
}

// A BF16 tensor of values.
OwnedTensor bf16_tensor(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
  OwnedTensor t{name, DType::BF16, std::move(shape), std::vector<uint8_t>(v.size() * 2)};
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = f32_to_bf16(v[i]);
    std::memcpy(t.bytes.data() + 2 * i, &h, 2);
  }
  return t;
}

void drop(std::vector<OwnedTensor>& ts, const std::string& name) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name == name) {
      ts.erase(ts.begin() + std::ptrdiff_t(i));
      return;
    }
  FAIL() << "no tensor " << name;
}

}  // namespace

TEST(LoaderVariants, HfPerExpertTensorsLoadToTheSameRows) {
  TempDir d;
  fs::copy_file(tiny("model-bf16/config.json"), d / "config.json");
  auto ts = read_all(tiny("model-bf16"));
  std::vector<OwnedTensor> a, b;  // two files, no index: the *.safetensors path
  const int64_t E = 16, I = 64, H = 128;
  for (auto& t : ts) {
    if (t.name.rfind("mtp.", 0) == 0) continue;  // the MTP block: already one tensor per expert
    const size_t pos = t.name.find("mlp.experts.");
    if (pos == std::string::npos) {
      (a.size() < 150 ? a : b).push_back(std::move(t));
      continue;
    }
    const std::string p = t.name.substr(0, pos) + "mlp.experts.";
    const bool fused = t.name.ends_with("gate_up_proj");
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + std::to_string(e) + ".";
      if (fused) {
        b.push_back({q + "gate_proj.weight", DType::BF16, {I, H}, rows(t, e * 2 * I, I, H, 2)});
        b.push_back({q + "up_proj.weight", DType::BF16, {I, H}, rows(t, e * 2 * I + I, I, H, 2)});
      } else {
        b.push_back({q + "down_proj.weight", DType::BF16, {H, I}, rows(t, e * H, H, I, 2)});
      }
    }
  }
  write_owned(d / "part-a.safetensors", a);
  write_owned(d / "part-b.safetensors", b);
  auto ref = load_model(tiny("model-bf16"));
  auto w = load_model(d.path);
  EXPECT_EQ(w->layout, "hf-bf16");
  for (size_t l = 0; l < 4; ++l)
    for (size_t e = 0; e < 16; ++e) {
      const MoeWeights &x = w->layers[l].moe, &y = ref->layers[l].moe;
      for (int64_t r = 0; r < I; ++r) {
        EXPECT_EQ(row_of(x.gate.e[e], r), row_of(y.gate.e[e], r));
        EXPECT_EQ(row_of(x.up.e[e], r), row_of(y.up.e[e], r));
      }
      for (int64_t r = 0; r < H; r += 17) EXPECT_EQ(row_of(x.down.e[e], r), row_of(y.down.e[e], r));
    }
  EXPECT_EQ(w->layers[2].in_norm, ref->layers[2].in_norm);
}

TEST(LoaderVariants, HfF32SmallTensorsAndF16Matrices) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      const bool small = t.name.ends_with("A_log") || t.name.ends_with("linear_attn.norm.weight");
      const bool f16 = t.name.ends_with("in_proj_z.weight");
      if (!small && !f16) continue;
      std::vector<uint8_t> out(t.bytes.size() / 2 * (small ? 4 : 2));
      for (size_t i = 0; i < t.bytes.size() / 2; ++i) {
        uint16_t h;
        std::memcpy(&h, t.bytes.data() + 2 * i, 2);
        float f = bf16_to_f32(h);
        if (small) {
          std::memcpy(out.data() + 4 * i, &f, 4);
        } else {  // bf16 -> f16: exact for normal f16 magnitudes, tiny values flushed to zero
          uint32_t u;
          std::memcpy(&u, &f, 4);
          const int exp = int((u >> 23) & 0xff) - 127 + 15;
          const uint16_t g = uint16_t(((u >> 16) & 0x8000u) |
                                      (exp > 0 && exp < 31 ? (uint32_t(exp) << 10) | ((u >> 13) & 0x3ffu) : 0u));
          std::memcpy(out.data() + 2 * i, &g, 2);
        }
      }
      t.bytes = std::move(out);
      t.dtype = small ? DType::F32 : DType::F16;
    }
  });
  auto ref = load_model(tiny("model-bf16"));
  auto w = load_model(d.path);
  EXPECT_EQ(w->layers[0].lin.a_neg, ref->layers[0].lin.a_neg);
  EXPECT_EQ(w->layers[1].lin.norm, ref->layers[1].lin.norm);
  EXPECT_EQ(w->layers[1].lin.in_z.dtype, DType::F16);
  auto x = row_of(w->layers[1].lin.in_z, 10), y = row_of(ref->layers[1].lin.in_z, 10);
  for (size_t j = 0; j < x.size(); ++j) EXPECT_NEAR(x[j], y[j], std::fabs(y[j]) * 1e-3 + 1e-4) << j;
}

TEST(LoaderVariants, MlxAcceptsUnquantisedModules) {
  auto ref = load_model(tiny("model-mlx-4bit"));
  TempDir d;
  rewrite_checkpoint(tiny("model-mlx-4bit"), d.path, [&](std::vector<OwnedTensor>& ts) {
    // layers.1 in_proj_z as a plain BF16 matrix; layers.0 switch_mlp.down_proj as a plain BF16 stack.
    const QMatrix& z = ref->layers[1].lin.in_z;
    std::vector<float> zv;
    for (int64_t r = 0; r < z.rows; ++r)
      for (float f : row_of(z, r)) zv.push_back(f);
    const std::string zm = kMlx + "1.linear_attn.in_proj_z";
    for (const char* s : {".weight", ".scales", ".biases"}) drop(ts, zm + s);
    ts.push_back(bf16_tensor(zm + ".weight", {z.rows, z.cols}, zv));
    std::vector<float> dv;
    for (const QMatrix& m : ref->layers[0].moe.down.e)
      for (int64_t r = 0; r < m.rows; ++r)
        for (float f : row_of(m, r)) dv.push_back(f);
    const std::string dm = kMlx + "0.mlp.switch_mlp.down_proj";
    for (const char* s : {".weight", ".scales", ".biases"}) drop(ts, dm + s);
    ts.push_back(bf16_tensor(dm + ".weight", {16, 128, 64}, dv));
  });
  auto w = load_model(d.path);
  EXPECT_EQ(w->layout, "mlx-affine");
  const QMatrix& z = w->layers[1].lin.in_z;
  EXPECT_EQ(z.kind, QMatrix::Kind::Dense);
  for (int64_t r : {0, 64, 127}) {
    auto x = row_of(z, r), y = row_of(ref->layers[1].lin.in_z, r);
    for (size_t j = 0; j < x.size(); ++j) EXPECT_EQ(x[j], bf16_to_f32(f32_to_bf16(y[j])));
  }
  EXPECT_EQ(w->layers[0].moe.down.e[7].kind, QMatrix::Kind::Dense);
  auto x = row_of(w->layers[0].moe.down.e[7], 99), y = row_of(ref->layers[0].moe.down.e[7], 99);
  for (size_t j = 0; j < x.size(); ++j) EXPECT_EQ(x[j], bf16_to_f32(f32_to_bf16(y[j])));
  EXPECT_EQ(w->layers[0].moe.down.e[8].kind, QMatrix::Kind::Dense);
  EXPECT_EQ(w->layers[0].moe.gate.e[8].kind, QMatrix::Kind::Affine);
}

TEST(LoaderVariants, TiedEmbeddings) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) { drop(ts, "lm_head.weight"); });
  std::string msg = error_of([&] { load_model(d.path); });
  EXPECT_TRUE(contains(msg, "tensor 'lm_head.weight' not found (searched model.safetensors in ")) << msg;
  auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
  cfg["text_config"]["tie_word_embeddings"] = true;
  write_text(d / "config.json", cfg.dump());
  auto w = load_model(d.path);
  EXPECT_EQ(w->lm_head.w, w->embed.w);
}

// ------------------------------------------------------------------------------------------------ errors

TEST(LoaderErrors, MissingTensor) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path,
                     [](std::vector<OwnedTensor>& ts) { drop(ts, kHf + "2.linear_attn.dt_bias"); });
  EXPECT_EQ(error_of([&] { load_model(d.path); }),
            "tensor 'model.language_model.layers.2.linear_attn.dt_bias' not found (searched model.safetensors in " +
                d.path + ")");
}

TEST(LoaderErrors, MissingExperts) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path,
                     [](std::vector<OwnedTensor>& ts) { drop(ts, kHf + "1.mlp.experts.gate_up_proj"); });
  std::string msg = error_of([&] { load_model(d.path); });
  EXPECT_TRUE(contains(msg, "tensor 'model.language_model.layers.1.mlp.experts.gate_up_proj' not found")) << msg;
}

TEST(LoaderErrors, WrongShape) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    OwnedTensor* t = find_tensor(ts, kHf + "1.linear_attn.in_proj_qkv.weight");
    t->shape = {256, 127};
    t->bytes.resize(256 * 127 * 2);
  });
  EXPECT_EQ(error_of([&] { load_model(d.path); }),
            "model.safetensors: tensor 'model.language_model.layers.1.linear_attn.in_proj_qkv.weight': expected shape "
            "[256, 128], found [256, 127]");
}

TEST(LoaderErrors, WrongDtype) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    OwnedTensor* t = find_tensor(ts, kHf + "0.linear_attn.A_log");
    t->dtype = DType::I16;
  });
  EXPECT_EQ(error_of([&] { load_model(d.path); }),
            "model.safetensors: tensor 'model.language_model.layers.0.linear_attn.A_log': expected dtype F32, BF16 or "
            "F16, found I16");
  TempDir d2;
  rewrite_checkpoint(tiny("model-bf16"), d2.path, [](std::vector<OwnedTensor>& ts) {
    find_tensor(ts, kHf + "3.self_attn.k_proj.weight")->dtype = DType::I16;
  });
  EXPECT_EQ(error_of([&] { load_model(d2.path); }),
            "model.safetensors: tensor 'model.language_model.layers.3.self_attn.k_proj.weight': expected dtype BF16, "
            "F16 or F32, found I16");
}

TEST(LoaderErrors, UnsupportedModelType) {
  TempDir d;
  for (const auto& e : fs::directory_iterator(tiny("model-bf16"))) fs::copy_file(e.path(), d / e.path().filename().string());
  auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
  cfg["model_type"] = "qwen3_next";
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }), "config.json: unsupported architecture qwen3_next"));
}

TEST(LoaderErrors, MlxQuantisationConfig) {
  TempDir d;
  for (const auto& e : fs::directory_iterator(tiny("model-mlx-4bit")))
    fs::copy_file(e.path(), d / e.path().filename().string());
  const auto orig = nlohmann::json::parse(read_text(d / "config.json"));
  auto cfg = orig;
  cfg["quantization"]["mode"] = "mxfp4";
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }), "unsupported quantisation mode \"mxfp4\" in quantization"));
  // Without the per-module 8-bit override the router's shapes disagree with the base 4 bits.
  cfg = orig;
  cfg["quantization"].erase(kMlx + "0.mlp.gate");
  cfg["quantization_config"].erase(kMlx + "0.mlp.gate");
  write_text(d / "config.json", cfg.dump());
  EXPECT_EQ(error_of([&] { load_model(d.path); }),
            "model-00001-of-00002.safetensors: tensor 'language_model.model.layers.0.mlp.gate.weight': " + d.path +
                "/config.json quantization gives 4 bits (group 64), expected last dimension 16, found 32 (weight [16, 32] "
                "with scales [16, 2] implies 8 bits)");
  cfg = orig;
  cfg.erase("quantization");
  cfg.erase("quantization_config");
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }),
                       "quantised (U32 with scales), expected a 'quantization' entry in config.json, found none"));
}

TEST(LoaderErrors, MlxMissingScalesAndBadScaleShape) {
  TempDir d;
  rewrite_checkpoint(tiny("model-mlx-4bit"), d.path,
                     [](std::vector<OwnedTensor>& ts) { drop(ts, kMlx + "2.linear_attn.in_proj_b.scales"); });
  std::string msg = error_of([&] { load_model(d.path); });
  EXPECT_TRUE(contains(msg, "model.safetensors: tensor 'language_model.model.layers.2.linear_attn.in_proj_b.weight': U32 "
                            "(quantised) weight, expected 'language_model.model.layers.2.linear_attn.in_proj_b.scales'"))
      << msg;
  TempDir d2;
  rewrite_checkpoint(tiny("model-mlx-4bit"), d2.path, [](std::vector<OwnedTensor>& ts) {
    OwnedTensor* t = find_tensor(ts, kMlx + "2.linear_attn.in_proj_b.biases");
    t->shape = {2, 4};
  });
  EXPECT_EQ(error_of([&] { load_model(d2.path); }),
            "model.safetensors: tensor 'language_model.model.layers.2.linear_attn.in_proj_b.biases': expected shape "
            "[4, 2], found [2, 4]");
}

TEST(LoaderErrors, UnknownTextTensorOnlyWarns) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    std::erase_if(ts, [](const OwnedTensor& t) { return t.name.rfind("mtp.", 0) == 0; });  // replaced by one below
    ts.push_back(bf16_tensor(kHf + "0.mystery.weight", {2}, {1.0f, 2.0f}));
    ts.push_back(bf16_tensor("mtp.fc.weight", {2}, {1.0f, 2.0f}));
  });
  ::testing::internal::CaptureStderr();
  auto w = load_model(d.path);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(err, "1 unexpected tensor(s) ignored: model.language_model.layers.0.mystery.weight")) << err;
  EXPECT_FALSE(contains(err, "mtp.")) << err;
  EXPECT_FALSE(contains(err, "visual")) << err;
}
