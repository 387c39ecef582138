// The tiny bf16 fixture converted to GGUF the way llama.cpp's converter lays it out, loaded back: the config
// and every weight equal the safetensors load (F32 file), the logits match the transformers reference (BF16
// file, same bound as the safetensors run), quantised files match their dequantised twins (the repack is
// exact, so only kernel rounding remains), and damaged files fail with errors naming file and tensor.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "app/make_backend.h"
#include "engine/backend.h"
#include "gguf_convert_util.h"
#include "loader_test_util.h"
#include "model/gguf_weights.h"
#include "model/weights.h"

using namespace lily;
using namespace lily_test;

namespace {

const std::string kTiny = std::string(LILY_TEST_DIR) + "/fixtures/tiny/model-bf16";

std::string convert(const TempDir& d, GgmlType t, bool twin = false, bool fused = false) {
  const std::string out = d / (ggml_type_name(uint32_t(t)) + (twin ? "-twin" : "") + (fused ? "-fused" : "") + ".gguf");
  convert_tiny_to_gguf(kTiny, out, {t, twin, fused});
  return out;
}

std::shared_ptr<ModelWeights> load_quiet(const std::string& p) {
  ::testing::internal::CaptureStderr();
  try {
    auto w = load_model(p);
    ::testing::internal::GetCapturedStderr();
    return w;
  } catch (...) {
    ::testing::internal::GetCapturedStderr();
    throw;
  }
}

void expect_same_matrix(const QMatrix& a, const QMatrix& b, const std::string& what) {
  ASSERT_EQ(a.rows, b.rows) << what;
  ASSERT_EQ(a.cols, b.cols) << what;
  std::vector<float> x(size_t(a.cols)), y(size_t(a.cols));
  for (int64_t r = 0; r < a.rows; ++r) {
    dequant_row(a, r, x.data());
    dequant_row(b, r, y.data());
    for (int64_t j = 0; j < a.cols; ++j) ASSERT_EQ(x[size_t(j)], y[size_t(j)]) << what << " row " << r << " col " << j;
  }
}

std::vector<float> prompt_logits(const std::shared_ptr<ModelWeights>& w, std::vector<int32_t>* ids_out = nullptr) {
  auto ref = SafetensorsFile::open(std::string(LILY_TEST_DIR) + "/fixtures/tiny/reference-bf16.safetensors");
  const TensorView* t = ref->find("prompt_ids");
  const auto* p = static_cast<const int32_t*>(t->data);
  std::vector<int32_t> ids(p, p + t->nbytes / 4);
  auto be = make_backend("cpu-ref", w);
  const int L = int(ids.size());
  std::vector<float> out(size_t(L) * size_t(w->cfg.vocab));
  auto st = be->new_state(1024);
  be->forward(*st, ids.data(), L, L, out.data(), {});
  if (ids_out) *ids_out = ids;
  return out;
}

struct Diff {
  double max_abs = 0;
  int top1 = 0, rows = 0;
};

Diff diff(const std::vector<float>& a, const std::vector<float>& b, int V) {
  Diff d;
  for (size_t r = 0; r < a.size() / size_t(V); ++r) {
    const float* x = a.data() + r * size_t(V);
    const float* y = b.data() + r * size_t(V);
    for (int i = 0; i < V; ++i) d.max_abs = std::max(d.max_abs, std::fabs(double(x[i]) - double(y[i])));
    d.top1 += std::max_element(x, x + V) - x == std::max_element(y, y + V) - y;
    ++d.rows;
  }
  return d;
}

}  // namespace

class GgufModelWeights : public ::testing::TestWithParam<bool> {};  // param: experts' gate/up fused

TEST_P(GgufModelWeights, ConfigAndEveryWeightEqualTheSafetensorsLoad) {
  TempDir d;
  const std::string f = convert(d, GgmlType::F32, false, GetParam());
  auto g = load_quiet(f);
  auto s = load_quiet(kTiny);
  EXPECT_EQ(g->layout, "gguf");
  const ModelConfig &a = g->cfg, &b = s->cfg;
  EXPECT_EQ(a.hidden, b.hidden);
  EXPECT_EQ(a.n_layers, b.n_layers);
  EXPECT_EQ(a.is_full, b.is_full);
  EXPECT_EQ(a.vocab, b.vocab);
  EXPECT_FLOAT_EQ(a.rms_eps, b.rms_eps);
  EXPECT_EQ(a.n_q_heads, b.n_q_heads);
  EXPECT_EQ(a.n_kv_heads, b.n_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.rope_dim, b.rope_dim);
  EXPECT_FLOAT_EQ(float(a.rope_theta), float(b.rope_theta));
  EXPECT_EQ(a.lin_k_heads, b.lin_k_heads);
  EXPECT_EQ(a.lin_v_heads, b.lin_v_heads);
  EXPECT_NE(a.lin_k_heads, a.lin_v_heads);  // the fixture exercises the value-head reorder
  EXPECT_EQ(a.lin_k_dim, b.lin_k_dim);
  EXPECT_EQ(a.lin_v_dim, b.lin_v_dim);
  EXPECT_EQ(a.conv_kernel, b.conv_kernel);
  EXPECT_EQ(a.n_experts, b.n_experts);
  EXPECT_EQ(a.top_k, b.top_k);
  EXPECT_EQ(a.expert_inter, b.expert_inter);
  EXPECT_EQ(a.shared_inter, b.shared_inter);
  EXPECT_EQ(a.tie_embeddings, b.tie_embeddings);

  expect_same_matrix(g->embed, s->embed, "embed");
  expect_same_matrix(g->lm_head, s->lm_head, "lm_head");
  EXPECT_EQ(g->final_norm, s->final_norm);
  for (size_t i = 0; i < g->layers.size(); ++i) {
    const LayerWeights &x = g->layers[i], &y = s->layers[i];
    const std::string L = "layer " + std::to_string(i) + " ";
    EXPECT_EQ(x.in_norm, y.in_norm) << L;
    EXPECT_EQ(x.post_norm, y.post_norm) << L;
    if (x.is_full) {
      expect_same_matrix(x.attn.q, y.attn.q, L + "q");
      expect_same_matrix(x.attn.k, y.attn.k, L + "k");
      expect_same_matrix(x.attn.v, y.attn.v, L + "v");
      expect_same_matrix(x.attn.o, y.attn.o, L + "o");
      EXPECT_EQ(x.attn.q_norm, y.attn.q_norm) << L;
      EXPECT_EQ(x.attn.k_norm, y.attn.k_norm) << L;
    } else {
      expect_same_matrix(x.lin.in_qkv, y.lin.in_qkv, L + "in_qkv");
      expect_same_matrix(x.lin.in_z, y.lin.in_z, L + "in_z");
      expect_same_matrix(x.lin.in_b, y.lin.in_b, L + "in_b");
      expect_same_matrix(x.lin.in_a, y.lin.in_a, L + "in_a");
      expect_same_matrix(x.lin.out, y.lin.out, L + "out");
      EXPECT_EQ(x.lin.conv, y.lin.conv) << L;
      EXPECT_EQ(x.lin.dt_bias, y.lin.dt_bias) << L;
      EXPECT_EQ(x.lin.a_neg, y.lin.a_neg) << L;
      EXPECT_EQ(x.lin.norm, y.lin.norm) << L;
    }
    expect_same_matrix(x.moe.router, y.moe.router, L + "router");
    ASSERT_EQ(x.moe.gate.e.size(), y.moe.gate.e.size());
    for (size_t e = 0; e < x.moe.gate.e.size(); ++e) {
      expect_same_matrix(x.moe.gate.e[e], y.moe.gate.e[e], L + "gate " + std::to_string(e));
      expect_same_matrix(x.moe.up.e[e], y.moe.up.e[e], L + "up " + std::to_string(e));
      expect_same_matrix(x.moe.down.e[e], y.moe.down.e[e], L + "down " + std::to_string(e));
    }
    expect_same_matrix(x.moe.sh_gate, y.moe.sh_gate, L + "sh_gate");
    expect_same_matrix(x.moe.sh_up, y.moe.sh_up, L + "sh_up");
    expect_same_matrix(x.moe.sh_down, y.moe.sh_down, L + "sh_down");
    expect_same_matrix(x.moe.sh_gate_w, y.moe.sh_gate_w, L + "sh_gate_w");
  }
}

INSTANTIATE_TEST_SUITE_P(GgufModel, GgufModelWeights, ::testing::Bool());

// BF16 GGUF on the reference CPU path against the transformers logits: the safetensors bf16 run's bound.
TEST(GgufModel, Bf16LogitsMatchTransformersReference) {
  TempDir d;
  auto w = load_quiet(convert(d, GgmlType::BF16));
  const auto got = prompt_logits(w);
  auto ref = SafetensorsFile::open(std::string(LILY_TEST_DIR) + "/fixtures/tiny/reference-bf16.safetensors");
  const TensorView* t = ref->find("prompt_logits");
  const auto* p = static_cast<const float*>(t->data);
  const Diff df = diff(got, std::vector<float>(p, p + t->nbytes / 4), w->cfg.vocab);
  std::printf("[ gguf bf16 ] top-1 %d/%d, max |dlogit| %.3g\n", df.top1, df.rows, df.max_abs);
  EXPECT_EQ(df.top1, df.rows);
  EXPECT_LE(df.max_abs, 1e-3);
}

// Quantised files (repacked to affine at load) against F32 files holding the same weights decoded by the
// reference decoder: equal up to kernel rounding (1e-3, the reference path's bound).
TEST(GgufModel, QuantisedFilesMatchTheirDequantisedTwins) {
  TempDir d;
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1}) {
    ::testing::internal::CaptureStderr();
    auto q = load_model(convert(d, t));
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find(ggml_type_name(uint32_t(t)) + " -> affine"), std::string::npos) << log;
    auto f = load_quiet(convert(d, t, true));
    const Diff df = diff(prompt_logits(q), prompt_logits(f), q->cfg.vocab);
    std::printf("[ gguf %s vs dequantised ] top-1 %d/%d, max |dlogit| %.3g\n", ggml_type_name(uint32_t(t)).c_str(),
                df.top1, df.rows, df.max_abs);
    EXPECT_EQ(df.top1, df.rows);
    EXPECT_LE(df.max_abs, 1e-3);
  }
}

TEST(GgufModel, ErrorsNameFileAndTensor) {
  TempDir d;
  const std::string f = convert(d, GgmlType::F32);
  // The same file without one tensor: rewrite it through the reader and writer.
  {
    GgufModel m(f);
    GgufWriter w;
    for (const std::string& k : m.first().keys()) {
      const GgufValue* v = m.kv(k);
      if (v->type == GgufType::STRING) w.add_string(k, v->s);
      else if (v->type == GgufType::F32) w.add_f32(k, float(v->f));
      else w.add_u32(k, uint32_t(v->i));
    }
    for (const std::string& n : m.names()) {
      if (n == "blk.1.ssm_a") continue;
      const GgufTensor& t = m.get(n);
      w.add_tensor(n, GgmlType(t.type), t.shape(), std::vector<uint8_t>(t.data, t.data + t.nbytes));
    }
    w.write(d / "missing.gguf");
  }
  std::string e = error_of([&] { load_quiet(d / "missing.gguf"); });
  EXPECT_NE(e.find("tensor 'blk.1.ssm_a' not found in"), std::string::npos) << e;
  EXPECT_NE(e.find("missing.gguf"), std::string::npos) << e;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.write(d / "llama.gguf");
  e = error_of([&] { load_quiet(d / "llama.gguf"); });
  EXPECT_NE(e.find("general.architecture is 'llama', expected 'qwen35moe'"), std::string::npos) << e;
}

// Whole loads of a damaged file: every outcome is a model or a lily::Error.
TEST(GgufModel, LoadCorruptedFile) {
  TempDir d;
  const std::string f = convert(d, GgmlType::Q8_0);
  const std::string src_s = read_text(f);
  const std::vector<uint8_t> src(src_s.begin(), src_s.end());
  const size_t hdr = GgufFile(MappedFile::from_bytes(src, "x")).data_offset();
  std::mt19937_64 rng(43);
  int ok = 0, rejected = 0;
  for (int it = 0; it < 150; ++it) {
    std::vector<uint8_t> b = src;
    if (it % 3 == 0) b.resize(size_t(rng() % b.size()));
    else for (int k = 0; k < 4; ++k) b[size_t(rng() % hdr)] ^= uint8_t(1u << (rng() % 8));
    write_text(d / "bad.gguf", std::string(b.begin(), b.end()));
    try {
      load_quiet(d / "bad.gguf");
      ++ok;
    } catch (const Error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << it << ": exception other than lily::Error: " << e.what();
    }
  }
  EXPECT_GT(rejected, 50);
}
