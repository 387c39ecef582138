// GPTQ, AWQ and compressed-tensors int4 checkpoints, written here from the tiny BF16 fixture with each format's
// own packing (GPTQ: along the input, zeros stored minus one; AWQ: along the output in AutoAWQ's interleaved
// nibble order; compressed-tensors pack-quantized: along the input, offset by 8, zero points packed along the
// output). Loaded (repacked at load into affine 4-bit), every matrix equals (q - z) * s exactly, the reference
// path gives the dequantised weights' logits bit for bit and the fast path stays within its bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "model/repack.h"
#include "quant_fixture_writers.h"
#include "quant_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

void check_format(Fmt f, const std::string& layout, const std::string& note) {
  TempDir d;
  const auto codes = write_int4(d.path, f);
  auto w = load_model(d.path);
  EXPECT_EQ(w->layout, layout);
  EXPECT_TRUE(has_note(*w, note)) << note;
  // every quantised matrix decodes to (q - z) * s exactly
  const LayerWeights& L0 = w->layers[0];
  const LayerWeights& L3 = w->layers[3];
  const std::string p0 = "model.language_model.layers.0.", p3 = "model.language_model.layers.3.";
  const std::vector<std::pair<std::string, const QMatrix*>> mats = {
      {p0 + "linear_attn.in_proj_qkv", &L0.lin.in_qkv}, {p0 + "linear_attn.out_proj", &L0.lin.out},
      {p3 + "self_attn.q_proj", &L3.attn.q},            {p3 + "self_attn.o_proj", &L3.attn.o},
      {p0 + "mlp.experts.7.down_proj", &L0.moe.down.e[7]}, {p3 + "mlp.experts.15.up_proj", &L3.moe.up.e[15]},
      {p0 + "mlp.shared_expert.gate_proj", &L0.moe.sh_gate}};
  for (const auto& [name, m] : mats) {
    ASSERT_TRUE(codes.count(name)) << name;
    const Int4& x = codes.at(name);
    EXPECT_EQ(m->kind, QMatrix::Kind::Affine);
    EXPECT_EQ(m->bits, 4);
    EXPECT_EQ(m->group, 64);
    std::vector<float> row(size_t(m->cols));
    int bad = 0;
    for (int64_t r = 0; r < m->rows; ++r) {
      dequant_row(*m, r, row.data());
      for (int64_t c = 0; c < m->cols; ++c) bad += row[size_t(c)] != x.w(r, c);
    }
    EXPECT_EQ(bad, 0) << name;
  }
  const auto ref = logits_of(dequantised_copy(w), "cpu-ref");
  EXPECT_TRUE(same_bits(logits_of(w, "cpu-ref"), ref));
  const auto fast = logits_of(w, "cpu");
  const int V = w->cfg.vocab;
  double worst = 0;
  for (size_t t = 0; t < fast.size() / size_t(V); ++t) {
    const float* a = fast.data() + t * V;
    const float* b = ref.data() + t * V;
    EXPECT_EQ(std::max_element(a, a + V) - a, std::max_element(b, b + V) - b) << "top-1 at " << t;
    for (int i = 0; i < V; ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  }
  EXPECT_LE(worst, 2e-2);
}

}  // namespace

TEST(LoaderInt4, GptqAsymmetric) { check_format(Fmt::Gptq, "hf-gptq", "GPTQ int4 to MLX affine 4-bit group 64"); }
TEST(LoaderInt4, Awq) { check_format(Fmt::Awq, "hf-awq", "AWQ int4 to MLX affine 4-bit group 64"); }
TEST(LoaderInt4, CompressedTensorsSymmetric) {
  check_format(Fmt::CtSym, "hf-compressed-tensors", "compressed-tensors pack-quantized int4");
}
TEST(LoaderInt4, CompressedTensorsAsymmetric) {
  check_format(Fmt::CtAsym, "hf-compressed-tensors", "compressed-tensors pack-quantized int4");
}

// Group 128 (the usual setting): each group's scale and bias repeated for both groups of 64, values exact.
TEST(LoaderInt4, RepackGroup128) {
  const int64_t R = 16, C = 256, G = C / 128;
  std::vector<uint32_t> qw(size_t(C / 8 * R)), qz(size_t(G * R / 8));
  std::vector<uint16_t> sc(size_t(G * R));
  auto qv = [](int64_t o, int64_t i) { return uint32_t((o * 7 + i * 3 + (i >> 5)) & 15); };
  auto zv = [](int64_t o, int64_t g) { return uint32_t(1 + ((o + 5 * g) % 15)); };
  for (int64_t i = 0; i < C; ++i)
    for (int64_t o = 0; o < R; ++o) qw[size_t((i / 8) * R + o)] |= qv(o, i) << (4 * (i % 8));
  for (int64_t g = 0; g < G; ++g)
    for (int64_t o = 0; o < R; ++o) {
      qz[size_t(g * (R / 8) + o / 8)] |= ((zv(o, g) - 1) & 15u) << (4 * (o % 8));
      sc[size_t(g * R + o)] = f32_to_f16(0.001f * float(1 + o + 3 * g));
    }
  Int4Source s;
  s.format = Int4Source::Format::Gptq;
  s.rows = R;
  s.cols = C;
  s.group = 128;
  s.qweight = reinterpret_cast<const uint8_t*>(qw.data());
  s.qzeros = reinterpret_cast<const uint8_t*>(qz.data());
  s.scales = reinterpret_cast<const uint8_t*>(sc.data());
  s.sdtype = DType::F16;
  std::vector<uint8_t> codes(size_t(R * C / 2));
  std::vector<float> scales(size_t(R * C / 64)), biases(size_t(R * C / 64));
  repack_int4(s, codes.data(), scales.data(), biases.data());
  QMatrix m;
  m.kind = QMatrix::Kind::Affine;
  m.sdtype = DType::F32;
  m.bits = 4;
  m.group = 64;
  m.rows = R;
  m.cols = C;
  m.w = codes.data();
  m.scales = scales.data();
  m.biases = biases.data();
  std::vector<float> row(static_cast<size_t>(C));
  for (int64_t o = 0; o < R; ++o) {
    dequant_row(m, o, row.data());
    for (int64_t i = 0; i < C; ++i)
      ASSERT_EQ(row[size_t(i)], float((double(qv(o, i)) - zv(o, i / 128)) * f16_to_f32(sc[size_t((i / 128) * R + o)])))
          << o << "," << i;
  }
}

TEST(LoaderInt4, ActOrderGptqIsAClearError) {
  TempDir d;
  write_int4(d.path, Fmt::Gptq);
  // channel 0 of one module moved to group 1: g_idx not monotone (act order)
  TempDir e;
  rewrite_checkpoint(d.path, e.path, [](std::vector<OwnedTensor>& ts) {
    OwnedTensor* g = find_tensor(ts, "model.language_model.layers.0.linear_attn.in_proj_qkv.g_idx");
    ASSERT_NE(g, nullptr);
    uint32_t one = 1;
    std::memcpy(g->bytes.data(), &one, 4);  // channel 0 in group 1
  });
  const std::string err = error_of([&] { load_model(e.path); });
  EXPECT_TRUE(contains(err, "act-order GPTQ")) << err;
  EXPECT_TRUE(contains(err, "in_proj_qkv.g_idx")) << err;
}

TEST(LoaderInt4, UnsupportedSettingsNameTheField) {
  TempDir d;
  write_int4(d.path, Fmt::Awq);
  auto cfg = nlohmann::json::parse(read_text(d / "config.json"));
  cfg["quantization_config"]["version"] = "gemv";
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }), "awq version \"gemv\""));
  cfg["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }), "unsupported quantisation method \"bitsandbytes\""));
  cfg["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 8}, {"group_size", 128}};
  write_text(d / "config.json", cfg.dump());
  EXPECT_TRUE(contains(error_of([&] { load_model(d.path); }), "8-bit weights; expected 4"));
}
