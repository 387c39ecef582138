// The synthetic model in the FP8 release's layout (synth/synthetic_fp8.h): kinds per module, determinism, weight
// statistics, the bytes the cost model counts, a finite, token-dependent forward on the reference kernels, and the
// command-line flag.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "app/make_backend.h"
#include "bench/cost_model.h"
#include "core/dtype.h"
#include "engine/backend.h"
#include "finite_forward_check.h"
#include "io/safetensors.h"
#include "synth/module_plan.h"
#include "synth/synthetic_fp8.h"

using namespace lily;

namespace {

bool kept_bf16(MatSlot s) {
  return s == MatSlot::Embed || s == MatSlot::LmHead || s == MatSlot::Router || s == MatSlot::ShGateW ||
         s == MatSlot::LinA || s == MatSlot::LinB;
}

std::vector<float> row_of(const QMatrix& q, int64_t r) {
  std::vector<float> v(static_cast<size_t>(q.cols));
  dequant_row(q, r, v.data());
  return v;
}

}  // namespace

TEST(SynthFp8, LayoutOfTheRelease) {
  auto a = make_synthetic_fp8("tiny", 7);
  auto b = make_synthetic_fp8("tiny", 7);
  auto c = make_synthetic_fp8("tiny", 8);
  EXPECT_EQ(a->layout, "fp8");
  int fp8 = 0, bf16 = 0;
  for (const auto& m : plan_modules(a->cfg))
    for (int e = 0; e < m.count; ++e) {
      const QMatrix& q = slot_matrix(*a, m, e);
      SCOPED_TRACE(m.name);
      ASSERT_TRUE(q.valid());
      EXPECT_EQ(q.rows, m.rows);
      EXPECT_EQ(q.cols, m.cols);
      if (kept_bf16(m.slot)) {
        EXPECT_EQ(q.kind, QMatrix::Kind::Dense);
        EXPECT_EQ(q.dtype, DType::BF16);
        ++bf16;
      } else {
        EXPECT_EQ(q.kind, QMatrix::Kind::Fp8Block);
        EXPECT_EQ(q.dtype, DType::F8_E4M3);
        EXPECT_EQ(q.sdtype, DType::F32);
        EXPECT_EQ(q.group, 128);
        const int64_t nsc = (q.rows + 127) / 128 * ((q.cols + 127) / 128);
        for (int64_t i = 0; i < nsc; ++i) {
          const float s = static_cast<const float*>(q.scales)[i];
          ASSERT_TRUE(std::isfinite(s) && s > 0.f) << i;
        }
        for (int64_t i = 0; i < q.rows * q.cols; ++i)
          ASSERT_NE(static_cast<const uint8_t*>(q.w)[i] & 0x7f, 0x7f) << "NaN code at " << i;
        ++fp8;
      }
      const size_t n = q.bytes() - (q.kind == QMatrix::Kind::Fp8Block
                                        ? size_t((q.rows + 127) / 128 * ((q.cols + 127) / 128)) * 4 : 0);
      const QMatrix& qb = slot_matrix(*b, m, e);
      const QMatrix& qc = slot_matrix(*c, m, e);
      EXPECT_EQ(std::memcmp(q.w, qb.w, n), 0);
      EXPECT_NE(std::memcmp(q.w, qc.w, n), 0);
    }
  EXPECT_GT(fp8, 0);
  EXPECT_GT(bf16, 0);
  EXPECT_EQ(a->final_norm, b->final_norm);
}

// Dequantised weights: mean ~0, std ~gain / sqrt(cols) (gain 1 for the projections, 4 for the router), as the MLX
// synthetic model.
TEST(SynthFp8, WeightStatistics) {
  auto w = make_synthetic_fp8("small", 1);
  auto stats = [](const QMatrix& q, int64_t rows) {
    double sum = 0, sq = 0;
    int64_t n = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (float x : row_of(q, r)) {
        sum += x;
        sq += double(x) * x;
        ++n;
      }
    const double mean = sum / double(n);
    return std::make_pair(mean, std::sqrt(sq / double(n) - mean * mean) * std::sqrt(double(q.cols)));
  };
  const auto [m0, s0] = stats(w->layers[0].lin.in_qkv, w->layers[0].lin.in_qkv.rows);
  EXPECT_NEAR(m0 * std::sqrt(double(w->layers[0].lin.in_qkv.cols)), 0.0, 0.05);
  EXPECT_NEAR(s0, 1.0, 0.1);
  const auto [m1, s1] = stats(w->layers[0].moe.router, w->layers[0].moe.router.rows);
  EXPECT_NEAR(s1, 4.0, 0.4);
  (void)m1;
}

// Bytes per decoded token: the FP8 matrices count their codes and block scales (the checkpoint's bytes).
TEST(SynthFp8, CostModelCountsCodesAndBlockScales) {
  auto w = make_synthetic_fp8("tiny", 2);
  const auto& c = w->cfg;
  const DecodeBytes b = decode_bytes_per_token(*w, 0, 2);
  auto fp8 = [](int64_t r, int64_t cols) { return uint64_t(r * cols + (r + 127) / 128 * ((cols + 127) / 128) * 4); };
  const uint64_t per_layer = 2 * fp8(c.expert_inter, c.hidden) + fp8(c.hidden, c.expert_inter);
  EXPECT_EQ(b.experts, uint64_t(c.n_layers) * uint64_t(c.top_k) * per_layer);
  EXPECT_EQ(b.lm_head, uint64_t(c.vocab) * uint64_t(c.hidden) * 2);
}

TEST(SynthFp8, ForwardIsFiniteOnTheReferencePath) {
  auto w = make_synthetic_fp8("tiny", 5);
  expect_finite_varied_logits(w);
}

// `--synthetic-format fp8` through the real executable: `lily logits` on the tiny preset writes finite logits; an
// unknown format is an error naming it.
TEST(SynthFp8, CliSyntheticFormat) {
  const std::string lily = std::string(LILY_BUILD_DIR) + "/lily logits --ids 1,2,3 --backend cpu-ref --out ";
  const std::string out = (std::filesystem::temp_directory_path() / "lily_synth_fp8_logits.st").string();
  const std::string ok = lily + out + " --synthetic tiny --synthetic-format fp8 2>/dev/null";
  ASSERT_EQ(std::system(ok.c_str()), 0) << ok;
  auto f = SafetensorsFile::open(out);
  const TensorView* t = f->find("prompt_logits");
  ASSERT_NE(t, nullptr);
  const float* p = static_cast<const float*>(t->data);
  for (size_t i = 0; i < t->nbytes / 4; ++i) ASSERT_TRUE(std::isfinite(p[i])) << i;
  std::filesystem::remove(out);
  const std::string err = (std::filesystem::temp_directory_path() / "lily_synth_fp8_err.txt").string();
  const std::string cmd = lily + out + " --synthetic tiny --synthetic-format fp4 2>" + err;
  EXPECT_NE(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(err);
  const std::string msg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(msg.find("'fp4'"), std::string::npos) << msg;
  std::filesystem::remove(err);
}
