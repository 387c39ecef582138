// Whole-model tests on the tiny fixtures against the transformers reference outputs (f32):
// teacher-forced prompt logits, greedy continuation through the caches, a long prompt whole and split.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "app/make_backend.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/fast/cpu_isa.h"
#include "engine/backend.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "tiny_layouts.h"

using namespace lily;

namespace {

struct Ref {
  std::shared_ptr<const SafetensorsFile> f;
  template <class T>
  std::vector<T> get(const std::string& name, std::vector<int64_t>* shape = nullptr) const {
    const TensorView* t = f->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return {};
    if (shape) *shape = t->shape;
    const T* p = static_cast<const T*>(t->data);
    return std::vector<T>(p, p + t->nbytes / sizeof(T));
  }
};

struct Cmp {
  double max_abs = 0, sq = 0;
  size_t n = 0;
  int top1_agree = 0, rows = 0;
};

void compare_rows(const float* ours, const float* ref, int rows, int V, Cmp& c) {
  for (int r = 0; r < rows; ++r) {
    const float* a = ours + static_cast<size_t>(r) * V;
    const float* b = ref + static_cast<size_t>(r) * V;
    for (int i = 0; i < V; ++i) {
      ASSERT_FALSE(std::isnan(a[i])) << "NaN at row " << r << " col " << i;
      double d = std::fabs(static_cast<double>(a[i]) - b[i]);
      c.max_abs = std::max(c.max_abs, d);
      c.sq += d * d;
      ++c.n;
    }
    c.top1_agree += (std::max_element(a, a + V) - a) == (std::max_element(b, b + V) - b);
    ++c.rows;
  }
}

void report(const char* what, const Cmp& c) {
  std::printf("[ %s ] top-1 %d/%d, max |dlogit| %.3g, rms %.3g\n", what, c.top1_agree, c.rows, c.max_abs,
              std::sqrt(c.sq / std::max<size_t>(1, c.n)));
}

class TinyModel : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {
 protected:
  void SetUp() override {
    std::string base = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
    std::string layout = std::get<0>(GetParam());
    w = load_model(base + "model-" + layout);
    ref.f = SafetensorsFile::open(base + "reference-" + test::tiny_reference_layout(layout) + ".safetensors");
    // "cpu-avx2" / "cpu-portable": the fast kernels forced to that tier (on an AVX-512 machine too), same bounds
    // as "cpu"
    std::string kind = std::get<1>(GetParam());
    for (fast::Isa isa : {fast::Isa::Avx2, fast::Isa::Portable})
      if (kind == std::string("cpu-") + fast::isa_name(isa)) {
        if (static_cast<int>(fast::detected_isa()) < static_cast<int>(isa)) GTEST_SKIP() << "tier not supported";
        fast::set_isa_override(isa);
        be = make_backend("cpu", w);
        ASSERT_EQ(be->name(), std::string("cpu-fast-") + fast::isa_name(isa));
      }
    if (!be) be = make_backend(kind, w);
    V = w->cfg.vocab;
  }
  void TearDown() override { fast::clear_isa_override(); }
  std::shared_ptr<ModelWeights> w;
  Ref ref;
  std::unique_ptr<Backend> be;
  int V = 0;
  // The reference kernels must meet the bound (1e-3). The fast CPU kernels multiply 4-bit weights
  // by ~15-bit integer activations (hi + lo/254 per group of 64): 1e-4 relative per dot product, which the
  // tiny model's large random logits (|logit| up to ~30) turn into ~1e-2 absolute after 24 decode steps;
  // their bound is 2e-2, and top-1 agreement must still be 100%.
  double tol() const { return std::string(std::get<1>(GetParam())) == "cpu-ref" ? 1e-3 : 2e-2; }
};

TEST_P(TinyModel, PromptLogitsMatchReference) {
  auto ids = ref.get<int32_t>("prompt_ids");
  auto want = ref.get<float>("prompt_logits");
  const int L = static_cast<int>(ids.size());
  std::vector<float> got(static_cast<size_t>(L) * V);
  auto st = be->new_state(1024);
  be->forward(*st, ids.data(), L, L, got.data(), {});
  Cmp c;
  compare_rows(got.data(), want.data(), L, V, c);
  report("prompt", c);
  EXPECT_EQ(c.top1_agree, L);
  EXPECT_LE(c.max_abs, tol());
}

TEST_P(TinyModel, HiddenStatesMatchReferenceLayerByLayer) {
  auto ids = ref.get<int32_t>("prompt_ids");
  std::vector<int64_t> hs;
  auto hidden = ref.get<float>("prompt_hidden", &hs);
  ASSERT_EQ(hs.size(), 3u);
  const int L = static_cast<int>(ids.size()), H = w->cfg.hidden;
  auto* cpu = dynamic_cast<CpuBackend*>(be.get());
  ASSERT_NE(cpu, nullptr);
  std::vector<double> err(hs[0], -1.0);
  const int NL = w->cfg.n_layers;
  // reference entries: 0 = embedding, 1..NL-1 = after layers 0..NL-2, NL = after the final norm
  cpu->on_hidden = [&](int layer, const float* x, int n) {
    ASSERT_EQ(n, L);
    if (layer == NL - 1) return;  // the last layer's raw output is not in the reference
    const int entry = layer == NL ? NL : layer + 1;
    const float* r = hidden.data() + static_cast<size_t>(entry) * L * H;
    double m = 0;
    for (size_t i = 0; i < static_cast<size_t>(L) * H; ++i) m = std::max(m, std::fabs(double(x[i]) - r[i]));
    err[entry] = m;
  };
  auto st = be->new_state(1024);
  be->forward(*st, ids.data(), L, 0, nullptr, {});
  for (size_t i = 0; i < err.size(); ++i) {
    EXPECT_GE(err[i], 0.0) << "hidden entry " << i << " never produced";
    EXPECT_LE(err[i], tol()) << "residual stream diverges at hidden entry " << i;
  }
}

TEST_P(TinyModel, GreedyDecodeThroughCachesMatchesReference) {
  auto ids = ref.get<int32_t>("prompt_ids");
  auto gids = ref.get<int32_t>("greedy_ids");
  auto glog = ref.get<float>("greedy_logits");
  const int L = static_cast<int>(ids.size()), N = static_cast<int>(gids.size());
  std::vector<float> logits(V);
  auto st = be->new_state(1024);
  be->forward(*st, ids.data(), L, 1, logits.data(), {});
  Cmp c;
  int agree = 0;
  for (int i = 0; i < N; ++i) {
    int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    agree += next == gids[i];
    be->forward(*st, &gids[i], 1, 1, logits.data(), {});  // teacher-force the reference's id
    compare_rows(logits.data(), glog.data() + static_cast<size_t>(i) * V, 1, V, c);
  }
  report("greedy", c);
  EXPECT_EQ(agree, N);
  EXPECT_EQ(c.top1_agree, N);
  EXPECT_LE(c.max_abs, tol());
}

TEST_P(TinyModel, LongPromptWholeAndSplitMatchReference) {
  auto ids = ref.get<int32_t>("long_ids");
  auto whole = ref.get<float>("long_logits_last8");
  auto split = ref.get<float>("long_split_logits_last8");
  const int L = static_cast<int>(ids.size());
  std::vector<float> a(8 * static_cast<size_t>(V)), b(a.size()), c3(a.size());
  {
    auto st = be->new_state(1024);
    be->forward(*st, ids.data(), L, 8, a.data(), {});
  }
  {  // 200 + 133 through the cache, as the reference's split run
    auto st = be->new_state(1024);
    be->forward(*st, ids.data(), 200, 0, nullptr, {});
    be->forward(*st, ids.data() + 200, L - 200, 8, b.data(), {});
  }
  {  // our own chunked prefill (chunks of 64) must equal the whole run
    auto st = be->new_state(1024);
    ForwardOptions o;
    o.prefill_chunk = 64;
    be->forward(*st, ids.data(), L, 8, c3.data(), o);
  }
  Cmp cw, cs;
  compare_rows(a.data(), whole.data(), 8, V, cw);
  compare_rows(b.data(), split.data(), 8, V, cs);
  report("long whole", cw);
  report("long split", cs);
  EXPECT_EQ(cw.top1_agree, 8);
  EXPECT_EQ(cs.top1_agree, 8);
  EXPECT_LE(cw.max_abs, tol());
  EXPECT_LE(cs.max_abs, tol());
  double chunk_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) chunk_diff = std::max(chunk_diff, std::fabs(double(a[i]) - c3[i]));
  // Reference kernels: chunking only regroups the same arithmetic. Fast kernels: a different chunking gives
  // experts other row counts, hence other kernel variants (1-row GEMV vs row blocks) with other rounding.
  const bool ref_kernels = std::string(std::get<1>(GetParam())) == "cpu-ref";
  EXPECT_LE(chunk_diff, ref_kernels ? 1e-5 : tol()) << "chunked prefill differs from whole prefill";
}

TEST_P(TinyModel, StateCloneContinuesIdentically) {
  auto ids = ref.get<int32_t>("long_ids");
  std::vector<float> a(V), b(V);
  auto st = be->new_state(1024);
  be->forward(*st, ids.data(), 100, 0, nullptr, {});
  auto copy = st->clone();
  be->forward(*st, ids.data() + 100, 20, 1, a.data(), {});
  be->forward(*copy, ids.data() + 100, 20, 1, b.data(), {});
  EXPECT_EQ(a, b);
  EXPECT_EQ(copy->pos, 120);
}

TEST_P(TinyModel, ContextOverflowAndBadIdsAreErrors) {
  auto st = be->new_state(4);
  std::vector<int32_t> ids = {1, 2, 3, 4, 5};
  EXPECT_THROW(be->forward(*st, ids.data(), 5, 0, nullptr, {}), Error);
  int32_t bad = V;
  EXPECT_THROW(be->forward(*st, &bad, 1, 0, nullptr, {}), Error);
}

INSTANTIATE_TEST_SUITE_P(Cpu, TinyModel,
                         ::testing::Combine(::testing::Values("bf16", "mlx-4bit", "mlx-4bit-compact", "mlx-mixed", "fp8", "gptq", "awq", "ct"), ::testing::Values("cpu-ref", "cpu", "cpu-avx2", "cpu-portable")),
                         [](const auto& info) {
                           std::string s = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace

// Every AVX2 kernel replays the AVX-512 kernel's arithmetic, so the whole model gives the same bits on both
// tiers: prompt logits (prefill: tile GEMM, chunk scan) and logits after decode steps (GEMV, GDN step).
TEST(TinyModelIsa, Avx2TierIsBitIdenticalToAvx512Tier) {
  if (static_cast<int>(fast::detected_isa()) < static_cast<int>(fast::Isa::Avx512))
    GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  const std::string base = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
  Ref ref;
  ref.f = SafetensorsFile::open(base + "reference-mlx-4bit.safetensors");
  auto ids = ref.get<int32_t>("long_ids");
  auto w = load_model(base + "model-mlx-4bit");
  const int V = w->cfg.vocab, L = 150;
  auto run = [&](fast::Isa isa) {
    fast::set_isa_override(isa);
    auto be = make_backend("cpu", w);
    std::vector<float> out(static_cast<size_t>(L + 3) * V);
    auto st = be->new_state(1024);
    be->forward(*st, ids.data(), L, L, out.data(), {});
    for (int t = 0; t < 3; ++t) be->forward(*st, &ids[L + t], 1, 1, out.data() + static_cast<size_t>(L + t) * V, {});
    fast::clear_isa_override();
    return out;
  };
  const auto a = run(fast::Isa::Avx512), b = run(fast::Isa::Avx2);
  ASSERT_EQ(a.size(), b.size());
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u) << "of " << a.size() << " logits";
}
