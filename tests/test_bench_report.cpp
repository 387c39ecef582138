#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "app/make_backend.h"
#include "bench/bench_report.h"
#include "bench/bench_runner.h"
#include "bench/cost_model.h"
#include "bench/svg_plot.h"
#include "eval/logit_metrics.h"
#include "eval/teacher_forced.h"
#include "synth/presets.h"
#include "synth/synthetic_model.h"

using namespace lily;

namespace {

// A deterministic stand-in model: the logits at a position peak at (id * 31 + pos) mod V, with a softmax
// spread that depends on nothing else, so results are known exactly.
struct FakeState final : SeqState {
  std::unique_ptr<SeqState> clone() const override { return std::make_unique<FakeState>(*this); }
  size_t bytes() const override { return 0; }
};

class FakeBackend final : public Backend {
 public:
  explicit FakeBackend(ModelConfig c) : cfg_(std::move(c)) {}
  std::string name() const override { return "fake"; }
  const ModelConfig& config() const override { return cfg_; }
  std::unique_ptr<SeqState> new_state(int max_ctx) override {
    auto s = std::make_unique<FakeState>();
    s->max_ctx = max_ctx;
    return s;
  }
  void forward(SeqState& st, const int32_t* ids, int n, int n_logits, float* out, const ForwardOptions&) override {
    EXPECT_LE(st.pos + n, st.max_ctx);
    for (int i = 0; i < n; ++i) {
      int pos = st.pos + i;
      if (i >= n - n_logits) {
        float* row = out + size_t(i - (n - n_logits)) * size_t(cfg_.vocab);
        int peak = int((int64_t(ids[i]) * 31 + pos) % cfg_.vocab);
        for (int v = 0; v < cfg_.vocab; ++v) row[v] = v == peak ? 2.0f : 0.0f;
      }
      ++calls_tokens;
    }
    st.pos += n;
  }
  int64_t calls_tokens = 0;

 private:
  ModelConfig cfg_;
};

}  // namespace

TEST(BenchRunner, ProtocolOnFakeBackend) {
  auto w = make_synthetic("tiny", 2);
  FakeBackend be(w->cfg);
  BenchOptions opt;
  opt.prefill_lengths = {16, 32};
  opt.decode_contexts = {32};
  opt.reps = 3;
  auto res = run_bench(be, opt);
  ASSERT_EQ(res.size(), 2u);
  EXPECT_TRUE(res[0].prefill_measured);
  EXPECT_FALSE(res[0].decode_measured);
  EXPECT_EQ(res[0].prefill_s.size(), 3u);
  EXPECT_TRUE(res[1].decode_measured);
  ASSERT_EQ(res[1].digests.size(), 3u);
  EXPECT_TRUE(res[1].digest_consistent);
  // warm-up (16 prefill) + 3 reps (16), then warm-up (32 + 4 decode) + 3 reps (32 + 64 decode)
  EXPECT_EQ(be.calls_tokens, 16 * 4 + (32 + 4) + 3 * (32 + 64));

  BenchContext ctx;
  ctx.backend = be.name();
  ctx.model_label = "synthetic:tiny";
  ctx.weights = w.get();
  ctx.options = opt;
  ctx.limits = DeviceLimits{"test device", 10.0, 1.0, "m1", "m2"};
  auto j = bench_json(ctx, res);
  for (const char* k : {"schema", "machine", "backend", "model", "protocol", "limits", "prefill", "decode",
                        "digests_consistent"})
    EXPECT_TRUE(j.contains(k)) << k;
  for (const char* k : {"cpu_model", "threads", "memory_bytes"}) EXPECT_TRUE(j["machine"].contains(k)) << k;
  EXPECT_GT(j["model"]["weight_bytes"].get<uint64_t>(), 0u);
  ASSERT_EQ(j["prefill"].size(), 2u);
  for (const char* k : {"length", "samples_s", "tok_s", "tflops", "fraction_of_limit"})
    EXPECT_TRUE(j["prefill"][0].contains(k)) << k;
  ASSERT_EQ(j["decode"].size(), 1u);
  for (const char* k : {"context", "samples_s", "tok_s", "bytes_per_token", "gbps", "fraction_of_limit", "digest",
                        "digests", "digest_consistent"})
    EXPECT_TRUE(j["decode"][0].contains(k)) << k;
  EXPECT_NEAR(j["decode"][0]["fraction_of_limit"].get<double>(), j["decode"][0]["gbps"].get<double>() / 10.0, 1e-12);
  EXPECT_NE(bench_table(j).find("digest"), std::string::npos);

  auto svg = bench_svg({{"a", j}, {"b", j}});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("polyline"), std::string::npos);
  auto dir = std::filesystem::temp_directory_path();
  auto jp = dir / "lily_bench_test.json", sp = dir / "lily_bench_test.svg";
  std::ofstream(jp) << j.dump();
  write_bench_svg({jp.string()}, sp.string());
  EXPECT_GT(std::filesystem::file_size(sp), 500u);
  std::filesystem::remove(jp);
  std::filesystem::remove(sp);
}

TEST(BenchCost, DecodeBytesOfRealShapes) {
  auto w = make_synthetic("tiny", 1);
  auto b = decode_bytes_per_token(*w, 1000, 2);
  EXPECT_EQ(b.kv, 1ull * 2 * 1 * 64 * 1000 * 2);  // 1 full layer, K+V, 1 kv head of 64, bf16
  EXPECT_GT(b.experts, 0u);
  EXPECT_GT(prefill_flops(*w, 10), 2.0 * double(active_params(*w)) * 10);
}

TEST(EvalRun, WindowedPerplexityOnFakeBackend) {
  ModelConfig c = make_synthetic_config("tiny");
  FakeBackend be(c);
  std::vector<int32_t> ids(50);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7) % 100);
  // Each prediction: logit 2 at one id, 0 elsewhere -> p(target) is e^2/(e^2+V-1) when the target is the
  // peak, 1/(e^2+V-1) otherwise. Check the sliding windows score every token once.
  auto r = windowed_perplexity(be, ids, 16, 8, 5);
  EXPECT_EQ(r.scored, 49);
  auto whole = windowed_perplexity(be, ids, 64, 64, 7);
  EXPECT_EQ(whole.scored, 49);
  EXPECT_EQ(whole.windows, 1);
  double z = std::exp(2.0) + c.vocab - 1;
  EXPECT_GE(whole.ppl(), std::exp(std::log(z) - 2.0) - 1e-9);
  EXPECT_LE(whole.ppl(), z + 1e-6);
  auto all = teacher_forced_logits(be, ids, 4);
  EXPECT_EQ(all.size(), ids.size() * size_t(c.vocab));
}

TEST(EvalRun, TinyFixtureReferenceAgrees) {
  // The reference CPU kernels against the fixture's f32 reference logits of the same 4-bit weights.
  const std::string dir = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
  auto ref = load_reference_logits(dir + "reference-mlx-4bit.safetensors");
  auto w = load_model(dir + "model-mlx-4bit");
  ASSERT_EQ(w->cfg.vocab, ref.vocab);
  auto be = make_backend("cpu-ref", w);
  auto ours = teacher_forced_logits(*be, ref.ids, 7);
  std::vector<int32_t> next(ref.ids.begin() + 1, ref.ids.end());
  auto c = compare_logits(ref.logits.data(), ours.data(), int(ref.ids.size()), ref.vocab, next);
  EXPECT_EQ(c.top1_agreement, 1.0);
  EXPECT_LT(c.mean_kl, 1e-6);
  EXPECT_LT(c.max_abs_err, 1e-3);
  EXPECT_NEAR(c.ppl_ours / c.ppl_ref, 1.0, 1e-4);
  // the optional long prompt (long_ids / long_logits_last8) is loaded with the prompt
  ASSERT_EQ(ref.long_ids.size(), 333u);
  ASSERT_EQ(ref.long_rows, 8);
  ASSERT_EQ(ref.long_logits.size(), size_t(8) * size_t(ref.vocab));
}
