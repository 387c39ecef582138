// The device step sampler (src/cuda/decode/sampler.cu) against its host reference (engine/step_sampler.h): the same id
// for every step of many parameter sets on the real vocabulary size (penalty table updated on the device), a
// chi-square distribution test of the device draws, the per-token cost of the sampler kernels in a CUDA graph, and
// CudaBackend::decode_sample vs the Backend default (forward + host sampling) on the demo model, across the
// input-ring restart, with and without an allowed-token mask (constrained decoding). Skipped without a device.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <random>
#include <vector>

#include "cuda_test_buffers.h"
#include "cuda/cuda_factory.h"
#include "cuda/decode/kernels.h"
#include "engine/backend.h"
#include "engine/step_sampler.h"
#include "engine/vocab_trie.h"
#include "model/weights.h"

using namespace lily;

namespace {

template <typename T>
cudaError_t dmalloc(T*& p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(&p), bytes);
}

struct DevSampler {  // device buffers for N steps of the sampler on one logit row
  float *logits = nullptr, *adj = nullptr;
  uint32_t* table = nullptr;
  cuda::SampWork* work = nullptr;
  int32_t *in_ids = nullptr, *out_ids = nullptr;
  cuda::StepCtl* ctl = nullptr;
  int V = 0, N = 0;
  ~DevSampler() {
    for (void* p : {(void*)logits, (void*)adj, (void*)table, (void*)work, (void*)in_ids, (void*)out_ids, (void*)ctl})
      if (p) cudaFree(p);
  }
  bool init(int v, int n) {
    V = v;
    N = n;
    bool ok = dmalloc(logits, size_t(V) * 4) == cudaSuccess && dmalloc(adj, size_t(V) * 4) == cudaSuccess &&
              dmalloc(table, size_t(V) * 4) == cudaSuccess &&
              dmalloc(work, cuda::samp_work_bytes(V)) == cudaSuccess &&
              dmalloc(in_ids, size_t(N + 1) * 4) == cudaSuccess &&
              dmalloc(out_ids, size_t(N) * 4) == cudaSuccess && dmalloc(ctl, sizeof(cuda::StepCtl)) == cudaSuccess;
    return ok && cudaMemset(work, 0, cuda::samp_work_bytes(V)) == cudaSuccess;
  }
  cuda::SampArgs args() const {
    cuda::SampArgs a;
    a.logits = logits;
    a.adj = adj;
    a.table = table;
    a.V = V;
    a.work = work;
    a.in_ids = in_ids;
    a.out_ids = out_ids;
    a.ctl = ctl;
    return a;
  }
  // Sets logits, table, params, step s0 and cursor 0; resets out_ids to -1.
  void reset(const std::vector<float>& l, const std::vector<uint32_t>& tab, const samp::StepParams& p, uint64_t s0) {
    cudaMemcpy(logits, l.data(), size_t(V) * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(table, tab.data(), size_t(V) * 4, cudaMemcpyHostToDevice);
    cudaMemset(out_ids, 0xff, size_t(N) * 4);
    cuda::StepCtl c{};
    c.n_given = 1;
    cudaMemcpy(ctl, &c, sizeof(c), cudaMemcpyHostToDevice);
    cuda::samp_init(work, p, s0, nullptr);
    cudaDeviceSynchronize();
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> r(static_cast<size_t>(N));
    cudaMemcpy(r.data(), out_ids, size_t(N) * 4, cudaMemcpyDeviceToHost);
    return r;
  }
};

struct Case {
  const char* name;
  float temp, top_p, min_p, rep, presence, freq;
  int top_k;
  int kind;  // 0 normal logits, 1 quantised (many ties), 2 with NaN / -inf, 3 flat
};

std::vector<float> make_logits(int V, int kind, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> n(0.0f, kind == 3 ? 0.3f : 3.0f);
  std::vector<float> l(static_cast<size_t>(V));
  for (auto& x : l) x = n(g);
  if (kind == 1)
    for (auto& x : l) x = std::round(x * 4.0f) / 4.0f;
  if (kind == 2)
    for (int i = 0; i < V; i += 97) l[size_t(i)] = (i / 97) % 2 ? NAN : -INFINITY;
  for (int i = 0; i < 64; ++i) l[size_t((i * 7919) % V)] += 8.0f;  // a head of likely tokens
  return l;
}

}  // namespace

TEST(CudaStepSampler, SameIdsAsHostReference) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Case cases[] = {
      {"T=1", 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
      {"T=0.7 top_p=0.9", 0.7f, 0.9f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 0},
      {"T=0.6 top_k=20 top_p=0.95", 0.6f, 0.95f, 0.0f, 1.0f, 0.0f, 0.0f, 20, 0},
      {"min_p=0.05", 1.0f, 1.0f, 0.05f, 1.0f, 0.0f, 0.0f, 0, 0},
      {"greedy + penalties", 0.0f, 1.0f, 0.0f, 1.3f, 1.5f, 0.0f, 0, 0},
      {"k=5000 p=0.5 all penalties", 1.3f, 0.5f, 0.0f, 1.1f, 0.2f, 0.3f, 5000, 0},
      {"ties k=100 p=0.7", 0.8f, 0.7f, 0.0f, 1.0f, 0.0f, 0.5f, 100, 1},
      {"NaN/-inf T=1 p=0.99", 1.0f, 0.99f, 0.0f, 1.0f, 0.0f, 0.0f, 0, 2},
      {"flat p=0.999 k=200000", 1.0f, 0.999f, 0.0f, 1.0f, 0.0f, 0.0f, 200000, 3},
      {"flat T=2 min_p=0.5", 2.0f, 1.0f, 0.5f, 1.0f, 0.0f, 0.0f, 0, 3},
  };
  for (int V : {248320, 5037}) {
    const int N = 40;
    DevSampler d;
    ASSERT_TRUE(d.init(V, N));
    int ci = 0;
    for (const Case& c : cases) {
      SamplerParams sp;
      sp.temperature = c.temp;
      sp.top_p = c.top_p;
      sp.min_p = c.min_p;
      sp.repetition_penalty = c.rep;
      sp.presence_penalty = c.presence;
      sp.frequency_penalty = c.freq;
      sp.top_k = c.top_k;
      const auto p = StepSampler::make_params(sp, V, 1000 + uint64_t(ci));
      const auto l = make_logits(V, c.kind, uint32_t(ci + V));
      std::vector<uint32_t> tab(size_t(V), 0);
      for (int i = 0; i < 200; ++i) tab[size_t((i * 31337) % V)] |= samp::kPromptBit;  // a "prompt"
      const uint64_t s0 = 17;
      d.reset(l, tab, p, s0);
      const auto a = d.args();
      for (int s = 0; s < N; ++s) cuda::sample_step(a, nullptr, false);
      CK(cudaDeviceSynchronize());
      const auto got = d.ids();
      int same = 0, distinct = 0;
      std::vector<int32_t> seen;
      for (int s = 0; s < N; ++s) {
        const int32_t want = StepSampler::pick(l.data(), tab.data(), V, p, samp::philox64(p.seed, s0 + uint64_t(s)));
        same += got[size_t(s)] == want;
        if (std::find(seen.begin(), seen.end(), want) == seen.end()) {
          seen.push_back(want);
          ++distinct;
        }
        if (got[size_t(s)] >= 0 && got[size_t(s)] < V) ++tab[size_t(got[size_t(s)])];
        else break;
      }
      std::printf("[ cuda step sampler V=%d %-28s ] %d/%d ids equal the host reference (%d distinct)\n", V, c.name,
                  same, N, distinct);
      EXPECT_EQ(same, N) << c.name;
      // the cursor and the table advanced on the device
      cuda::StepCtl ctl;
      cudaMemcpy(&ctl, d.ctl, sizeof(ctl), cudaMemcpyDeviceToHost);
      EXPECT_EQ(ctl.cursor, N);
      std::vector<uint32_t> dtab(static_cast<size_t>(V));
      cudaMemcpy(dtab.data(), d.table, size_t(V) * 4, cudaMemcpyDeviceToHost);
      EXPECT_TRUE(dtab == tab) << c.name;
      ++ci;
    }
  }
}

TEST(CudaStepSampler, DrawsFollowTheDistribution) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int V = 248320, N = 20000, K = 24;
  DevSampler d;
  ASSERT_TRUE(d.init(V, N));
  std::vector<float> l(size_t(V), -200.0f);  // weight 0 in fixed point: never drawn
  std::mt19937 g(5);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<int> head;
  for (int i = 0; i < K; ++i) {
    const int id = (i * 10007 + 13) % V;
    head.push_back(id);
    l[size_t(id)] = n(g);
  }
  SamplerParams sp;
  sp.temperature = 0.9f;
  sp.top_p = 0.85f;
  const auto p = StepSampler::make_params(sp, V, 2024);
  d.reset(l, std::vector<uint32_t>(size_t(V), 0), p, 0);
  const auto a = d.args();
  for (int s = 0; s < N; ++s) cuda::sample_step(a, nullptr, false);
  CK(cudaDeviceSynchronize());
  const auto got = d.ids();
  // expected: softmax at T over the head, nucleus by descending probability (smallest prefix reaching 0.85)
  std::vector<int> order(head);
  std::sort(order.begin(), order.end(), [&](int x, int y) { return l[size_t(x)] > l[size_t(y)]; });
  const double mx = l[size_t(order[0])];
  std::vector<double> w;
  double z = 0;
  for (int id : order) z += w.emplace_back(std::exp((l[size_t(id)] - mx) / 0.9));
  double c = 0;
  size_t m = 0;
  while (m < w.size() && c < 0.85 * z) c += w[m++];
  std::vector<int> cnt(size_t(K), 0);
  for (int s = 0; s < N; ++s) {
    const auto it = std::find(order.begin(), order.begin() + long(m), got[size_t(s)]);
    ASSERT_NE(it, order.begin() + long(m)) << "step " << s << " drew " << got[size_t(s)] << " outside the nucleus";
    ++cnt[size_t(it - order.begin())];
  }
  double chi2 = 0;
  for (size_t i = 0; i < m; ++i) {
    const double e = w[i] / c * N;
    chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
  }
  const double df = double(m) - 1, bound = df + 6.0 * std::sqrt(2.0 * std::max(df, 1.0));
  std::printf("[ cuda step sampler ] %zu-token nucleus: chi2 %.1f over %.0f dof (bound %.1f)\n", m, chi2, df, bound);
  EXPECT_LT(chi2, bound);
}

TEST(CudaStepSampler, CostPerTokenInAGraph) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int V = 248320, N = 400;
  DevSampler d;
  ASSERT_TRUE(d.init(V, N));
  const auto l = make_logits(V, 0, 3);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int cfg = 0; cfg < 3; ++cfg) {
    SamplerParams sp;
    if (cfg == 0) sp.temperature = 0;
    if (cfg == 2) {
      sp.temperature = 0.7f;
      sp.top_k = 20;
      sp.top_p = 0.9f;
      sp.presence_penalty = 0.5f;
    }
    const auto p = StepSampler::make_params(sp, V, 9);
    d.reset(l, std::vector<uint32_t>(size_t(V), 0), p, 0);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    cuda::sample_step(d.args(), s, false);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    CK(cudaGraphLaunch(ge, s));  // warm-up
    cudaEventRecord(e0, s);
    for (int i = 1; i < N; ++i) CK(cudaGraphLaunch(ge, s));
    cudaEventRecord(e1, s);
    CK(cudaStreamSynchronize(s));
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    std::printf("[ cuda step sampler cost ] %s: %.1f us per token (graph of 9 kernels, V=%d)\n",
                cfg == 0 ? "greedy" : cfg == 1 ? "T=1 full vocabulary" : "T=0.7 top_k=20 top_p=0.9 presence", 1e3 * ms / (N - 1), V);
    const auto got = d.ids();
    for (int i = 0; i < N; ++i) ASSERT_TRUE(got[size_t(i)] >= 0 && got[size_t(i)] < V) << i;
    EXPECT_LT(1e3 * ms / (N - 1), 200.0);  // a sampler slower than 200 us would cost > 7% of a 2.7 ms step
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  cudaStreamDestroy(s);
}

namespace {

// The CUDA backend of the demo model with prompts through the decode step (LILY_CUDA_PREFILL=decode): the same
// logits as the host path's forward, so both paths must pick the same ids.
std::unique_ptr<Backend> demo_backend_decode_prefill(const std::shared_ptr<ModelWeights>& w) {
  setenv("LILY_CUDA_PREFILL", "decode", 1);
  auto be = make_cuda_backend(w);
  unsetenv("LILY_CUDA_PREFILL");
  return be;
}
const std::vector<int32_t> kDemoPrompt = {11, 400, 27, 3000, 5, 81, 902, 14};

}  // namespace

TEST(CudaStepSampler, DecodeSampleMatchesHostSamplingOnTheDemoModel) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto w = load_model(std::string(LILY_TEST_DIR) + "/../demo/tiny-model");
  auto be = demo_backend_decode_prefill(w);
  const int V = w->cfg.vocab;
  const std::vector<int32_t> prompt = kDemoPrompt;
  SamplerParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 50;
  sp.top_p = 0.9f;
  sp.repetition_penalty = 1.1f;
  sp.frequency_penalty = 0.2f;
  sp.has_seed = true;
  sp.seed = 7;
  for (int max_steps : {40, 4200}) {  // 4200: past the 4096-entry input ring (one restart)
    for (int stop_at : {1, 25, 1 << 30}) {
      if (max_steps == 4200 && stop_at != 1 << 30) continue;
      std::vector<int32_t> ids[2];
      std::vector<float> last[2];
      int consumed[2], pos[2];
      for (int path = 0; path < 2; ++path) {
        auto st = be->new_state(8 + max_steps + 4);
        be->forward(*st, prompt.data(), int(prompt.size()) - 1, 0, nullptr, {});
        StepSampler smp(sp, prompt, V);
        auto cb = [&](int32_t id) {
          ids[path].push_back(id);
          return int(ids[path].size()) < stop_at;
        };
        last[path].assign(size_t(V), NAN);
        consumed[path] = path == 0 ? be->decode_sample(*st, smp, prompt.back(), max_steps, cb, last[path].data())
                                   : be->Backend::decode_sample(*st, smp, prompt.back(), max_steps, cb, last[path].data());
        pos[path] = st->pos;
        EXPECT_EQ(smp.step(), ids[path].size());
      }
      const int want = std::min(stop_at + 1, max_steps);
      std::printf("[ cuda decode_sample steps=%d stop=%d ] device %zu ids, host %zu ids, consumed %d / %d\n", max_steps,
                  stop_at, ids[0].size(), ids[1].size(), consumed[0], consumed[1]);
      EXPECT_EQ(ids[0], ids[1]);
      EXPECT_EQ(consumed[0], want);
      EXPECT_EQ(consumed[1], want);
      EXPECT_EQ(pos[0], 7 + want);
      EXPECT_EQ(pos[1], 7 + want);
      EXPECT_TRUE(last[0] == last[1]) << "logits after the last consumed token differ";
    }
  }
}

// Constrained decoding: CudaBackend::decode_sample with an allowed-token mask (applied inside the device sampler, only
// the id read back) against the Backend default (forward, the mask applied to the host logits, the host step
// sampler). The mask changes with the step and the previous token (so a stale or skipped upload shows); one of the
// masks allows only a few tokens, one returns false (nothing allowed) at step 30, and one runs past the input ring's
// restart. Greedy and sampled: the same ids, each allowed by the mask of its step, the same consumed count and logits
// after the last consumed token.
TEST(CudaStepSampler, MaskedDecodeMatchesHostSamplingOnTheDemoModel) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  auto w = load_model(std::string(LILY_TEST_DIR) + "/../demo/tiny-model");
  auto be = demo_backend_decode_prefill(w);
  const int V = w->cfg.vocab;
  const std::vector<int32_t> prompt = kDemoPrompt;
  for (int cfg = 0; cfg < 4; ++cfg) {
    SamplerParams sp;
    if (cfg == 0) {
      sp.temperature = 0.0f;  // greedy
    } else {
      sp.temperature = cfg == 3 ? 1.0f : 0.8f;
      sp.top_k = cfg == 1 ? 50 : 0;
      sp.top_p = cfg == 1 ? 0.9f : 1.0f;
      sp.repetition_penalty = cfg == 2 ? 1.1f : 1.0f;
      sp.has_seed = true;
      sp.seed = 11 + cfg;
    }
    const bool few = cfg == 2;  // at most 7 tokens allowed per step
    const int max_steps = cfg == 1 ? 4200 : 60;  // 4200: past the 4096-entry input ring (one restart)
    std::vector<int32_t> ids[2];
    std::vector<float> last[2];
    int consumed[2], pos[2];
    for (int path = 0; path < 2; ++path) {
      auto st = be->new_state(8 + max_steps + 4);
      be->forward(*st, prompt.data(), int(prompt.size()) - 1, 0, nullptr, {});
      StepSampler smp(sp, prompt, V);
      int step = 0;
      int32_t prev = prompt.back();
      std::vector<std::vector<uint32_t>> masks;
      TokenMaskFn mask = [&](uint32_t* words) {
        if (cfg == 3 && step == 30) return false;
        std::fill(words, words + mask_words(V), 0u);
        for (int32_t i = 0; i < V; ++i) {
          const uint32_t h = uint32_t(i) * 2654435761u ^ uint32_t(step * 40503 + prev * 977);
          if (few ? h % 1024u < 2u : (h >> 7) % 3u == 0u)  // few: about 8 of the demo's 4,160 tokens
            words[i >> 5] |= 1u << (i & 31);
        }
        words[(step * 131 % V) >> 5] |= 1u << ((step * 131 % V) & 31);  // never empty
        masks.emplace_back(words, words + mask_words(V));
        ++step;
        return true;
      };
      auto cb = [&](int32_t id) {
        ids[path].push_back(id);
        prev = id;
        return true;
      };
      last[path].assign(size_t(V), NAN);
      consumed[path] = path == 0 ? be->decode_sample(*st, smp, prompt.back(), max_steps, cb, last[path].data(), mask)
                                 : be->Backend::decode_sample(*st, smp, prompt.back(), max_steps, cb,
                                                              last[path].data(), mask);
      pos[path] = st->pos;
      ASSERT_EQ(masks.size(), ids[path].size());
      for (size_t j = 0; j < ids[path].size(); ++j)
        EXPECT_TRUE(mask_bit(masks[j].data(), ids[path][j])) << "path " << path << " step " << j << " id "
                                                             << ids[path][j] << " not allowed";
    }
    const int want = cfg == 3 ? 30 : max_steps;
    std::printf("[ cuda masked decode_sample cfg=%d ] device %zu ids, host %zu ids, consumed %d / %d\n", cfg,
                ids[0].size(), ids[1].size(), consumed[0], consumed[1]);
    EXPECT_EQ(ids[0], ids[1]) << "cfg " << cfg;
    EXPECT_EQ(int(ids[0].size()), want) << "cfg " << cfg;
    EXPECT_EQ(consumed[0], consumed[1]) << "cfg " << cfg;
    EXPECT_EQ(pos[0], 7 + consumed[0]) << "cfg " << cfg;
    EXPECT_EQ(pos[1], 7 + consumed[1]) << "cfg " << cfg;
    EXPECT_TRUE(last[0] == last[1]) << "cfg " << cfg << ": logits after the last consumed token differ";
  }
}

#endif  // LILY_HAVE_CUDA
