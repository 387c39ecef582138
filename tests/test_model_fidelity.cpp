// The massive-activations fixture (tests/fixtures/tinym: tools/fixtures/presets-fidelity.json `tinym`, made with
// transformers by tools/fixtures/make_fixtures.py; its MLX 4-bit layout, the bf16 one is made by
// scripts/check-fidelity.sh: the tiny shapes, 4 rows of layer 1's shared expert scaled so that its intermediate
// reaches ~1e5 and writing into residual channels 5 and 77, up to ~5e3 from layer 1 on; a 224-token chat prompt).
// First that the reference really carries those magnitudes, then every CPU backend against it, teacher-forced
// over the prompt in one chunk and in 64-token chunks, and the last rows
// of the long prompt: top-1 >= 99% and mean KL <= 1e-3 (the fidelity bound of docs/cuda-prefill.md), no
// non-finite logit. With a CUDA device also the CUDA backend: the default prefill and the token-by-token decode
// path (LILY_CUDA_PREFILL=decode).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "eval/logit_metrics.h"
#include "eval/teacher_forced.h"
#include "io/safetensors.h"
#include "model/weights.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_factory.h"
#endif

using namespace lily;

namespace {

const std::string kBase = std::string(LILY_TEST_DIR) + "/fixtures/tinym/";

TEST(MassiveFixture, ReferenceCarriesMassiveActivations) {
  for (const char* layout : {"mlx-4bit"}) {
    auto f = SafetensorsFile::open(kBase + "reference-" + layout + ".safetensors");
    const TensorView* h = f->find("prompt_hidden");  // [layers + 1, L, hidden]: after the embedding and each layer
    ASSERT_NE(h, nullptr);
    ASSERT_EQ(h->dtype, DType::F32);
    ASSERT_EQ(h->shape.size(), 3u);
    const int64_t L = h->shape[1], H = h->shape[2];
    ASSERT_GE(L, 200);
    ASSERT_EQ(H, 128);
    const float* x = static_cast<const float*>(h->data);
    auto max_abs = [&](int entry, bool massive_channels) {
      float m = 0;
      for (int64_t t = 0; t < L; ++t)
        for (int64_t c = 0; c < H; ++c)
          if ((c == 5 || c == 77) == massive_channels) m = std::max(m, std::fabs(x[(entry * L + t) * H + c]));
      return m;
    };
    EXPECT_LT(max_abs(1, true), 100.0f) << layout << ": before layer 1's MLP the channels are ordinary";
    EXPECT_GT(max_abs(2, true), 1e3f) << layout << ": after layer 1";
    EXPECT_GT(max_abs(3, true), 1e3f) << layout << ": they stay";
    EXPECT_LT(max_abs(2, false), 100.0f) << layout << ": the other channels stay ordinary";
  }
}

struct Case {
  const char* layout;
  const char* backend;
  const char* env = nullptr;  // an environment variable set while the backend is made ("NAME=VALUE")
};

// Sets NAME=VALUE for its lifetime, then restores the previous value.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* assignment) {
    if (!assignment) return;
    const std::string a = assignment;
    name_ = a.substr(0, a.find('='));
    const char* old = std::getenv(name_.c_str());
    had_ = old != nullptr;
    if (had_) old_ = old;
    setenv(name_.c_str(), a.substr(a.find('=') + 1).c_str(), 1);
  }
  ~ScopedEnv() {
    if (name_.empty()) return;
    if (had_) setenv(name_.c_str(), old_.c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

class MassiveModel : public ::testing::TestWithParam<Case> {};

TEST_P(MassiveModel, HoldsTheFidelityBound) {
  const Case p = GetParam();
#ifdef LILY_HAVE_CUDA
  if (std::string(p.backend) == "cuda" && !cuda_device_available()) GTEST_SKIP() << "no CUDA device";
#endif
  auto w = load_model(kBase + "model-" + p.layout);
  ReferenceLogits ref = load_reference_logits(kBase + "reference-" + p.layout + ".safetensors");
  ASSERT_GE(ref.ids.size(), 200u);
  std::unique_ptr<Backend> be;
  {
    ScopedEnv env(p.env);
    be = make_backend(p.backend, w);
  }
  const int V = ref.vocab, L = static_cast<int>(ref.ids.size());
  std::vector<int32_t> next(ref.ids.begin() + 1, ref.ids.end());
  for (int chunk : {0, 64}) {
    std::vector<float> got = teacher_forced_logits(*be, ref.ids, chunk);
    LogitComparison c = compare_logits(ref.logits.data(), got.data(), L, V, next);
    std::printf("[ %s %s %s chunk %d ] %d rows: top-1 %.4f, mean KL %.3g, max |dlogit| %.3g\n", p.layout, p.backend,
                p.env ? p.env : "", chunk, c.positions, c.top1_agreement, c.mean_kl, c.max_abs_err);
    EXPECT_EQ(c.non_finite, 0);
    EXPECT_GE(c.top1_agreement, 0.99) << "chunk " << chunk;
    EXPECT_LE(c.mean_kl, 1e-3) << "chunk " << chunk;
  }
  ASSERT_GT(ref.long_rows, 0);
  std::vector<float> long_all = teacher_forced_logits(*be, ref.long_ids, 0);
  const size_t skip = (ref.long_ids.size() - size_t(ref.long_rows)) * size_t(V);
  LogitComparison l = compare_logits(ref.long_logits.data(), long_all.data() + skip, ref.long_rows, V, {});
  EXPECT_EQ(l.non_finite, 0);
  EXPECT_GE(l.top1_agreement, 0.99);
  EXPECT_LE(l.mean_kl, 1e-3);
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(info.param.layout) + "_" + info.param.backend;
  if (info.param.env) s += std::string("_") + info.param.env;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Cpu, MassiveModel,
                         ::testing::Values(Case{"mlx-4bit", "cpu-ref"}, Case{"mlx-4bit", "cpu"}),
                         case_name);
#ifdef LILY_HAVE_CUDA
INSTANTIATE_TEST_SUITE_P(Cuda, MassiveModel,
                         ::testing::Values(Case{"mlx-4bit", "cuda"}, Case{"mlx-4bit", "cuda", "LILY_CUDA_PREFILL=decode"}),
                         case_name);
#endif

}  // namespace
