// Speculative decoding (engine/speculative.h) on the tiny fixture with its MTP block: greedy output identical to
// plain decoding over 500+ tokens (real drafts and emulated acceptance), the sampled path's distribution equal to
// plain sampling's (chi-square), the Generator's session cache and cancellation with MTP on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "app/make_backend.h"
#include "core/error.h"
#include "engine/backend.h"
#include "engine/generate.h"
#include "engine/session_cache.h"
#include "engine/speculative.h"
#include "engine/step_sampler.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "test_backends.h"
#include "tiny_mtp_fixture.h"
#include "tokenizer/tokenizer.h"

using namespace lily;

namespace {

const std::string kTiny = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";

test::TinyMtp& fx() { return test::tiny_mtp(); }

// Prefill of the fixture prompt with the MTP rows filled; returns the first token (greedy or sampled by ss).
struct Prefilled {
  std::unique_ptr<SeqState> st;
  MtpCarry carry;
  std::vector<float> logits;
};
Prefilled prefill(Backend& be, int ctx) {
  Prefilled p;
  p.st = be.new_state(ctx);
  p.logits.resize(size_t(be.config().vocab));
  ForwardOptions fo;
  fo.on_hidden = mtp_prefill_hook(be, *p.st, fx().prompt, p.carry);
  be.forward(*p.st, fx().prompt.data(), int(fx().prompt.size()), 1, p.logits.data(), fo);
  return p;
}

SamplerParams greedy_params() {
  SamplerParams s;
  s.temperature = 0;
  return s;
}

std::vector<int32_t> plain_greedy(Backend& be, int steps) {
  Prefilled p = prefill(be, 1024);
  StepSampler ss(greedy_params(), fx().prompt, be.config().vocab);
  const int32_t first = ss.sample(p.logits.data());
  std::vector<int32_t> out{first};
  be.decode_sample(*p.st, ss, first, steps, [&](int32_t id) { out.push_back(id); return true; });
  return out;
}

double chi2_critical(int df) {  // upper 0.001 point (Wilson-Hilferty)
  const double z = 3.09, a = 2.0 / (9.0 * df);
  return df * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Pearson chi-square of counts against expected counts; cells expected < 5 are pooled into one.
std::pair<double, int> chi2(const std::vector<double>& expected, const std::vector<double>& observed) {
  double stat = 0, pe = 0, po = 0;
  int cells = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i] < 5) {
      pe += expected[i];
      po += observed[i];
      continue;
    }
    stat += (observed[i] - expected[i]) * (observed[i] - expected[i]) / expected[i];
    ++cells;
  }
  if (pe > 0) {
    stat += (po - pe) * (po - pe) / std::max(pe, 1e-9);
    ++cells;
  }
  return {stat, cells - 1};
}

}  // namespace

class SpecGreedy : public ::testing::TestWithParam<std::tuple<const char*, int, double>> {};

// 520 tokens: the speculative output equals plain greedy decoding, with the MTP block's drafts (p < 0) or with each
// draft replaced by the plain token with probability p (most drafts accepted: the accept path runs too).
TEST_P(SpecGreedy, IdenticalToPlainDecoding) {
  const auto [backend, k, p] = GetParam();
  if (!test_backend_usable(backend)) GTEST_SKIP() << "no CUDA device";
  auto be = make_test_backend(backend, fx().w);
  constexpr int kSteps = 520;
  std::vector<int32_t> plain = plain_greedy(*be, kSteps + 1);
  const int32_t after = plain.back();  // the token plain decoding picks after the compared run
  plain.pop_back();
  std::vector<int32_t> oracle(plain.begin() + 1, plain.end());
  Prefilled pf = prefill(*be, 1024);
  StepSampler ss(greedy_params(), fx().prompt, be->config().vocab);
  const int32_t first = ss.sample(pf.logits.data());
  std::vector<int32_t> out{first};
  MtpConfig mc;
  mc.k = k;
  mc.auto_off = false;
  if (p >= 0) {
    mc.oracle = &oracle;
    mc.accept_p = p;
  }
  MtpStats stats;
  const int consumed = mtp_decode(*be, *pf.st, ss, first, kSteps, [&](int32_t id) { out.push_back(id); return true; },
                                  nullptr, &pf.carry, mc, &stats);
  ASSERT_EQ(out.size(), plain.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], plain[i]) << "token " << i;
  EXPECT_EQ(consumed, kSteps);
  EXPECT_EQ(pf.st->pos, int(fx().prompt.size()) + kSteps);
  EXPECT_GT(stats.drafted, 0);
  std::printf("[ %s k=%d p=%.2f ] drafted %lld accepted %lld in %lld rounds\n", backend, k, p,
              static_cast<long long>(stats.drafted), static_cast<long long>(stats.accepted),
              static_cast<long long>(stats.rounds));
  if (p >= 0.5) {
    EXPECT_GT(stats.accepted, stats.drafted / 4);
  }
  // the state decodes on exactly like the plain one
  std::vector<float> a(size_t(be->config().vocab));
  const int32_t last = out.back();
  be->forward(*pf.st, &last, 1, 1, a.data(), ForwardOptions{});
  EXPECT_EQ(int(std::max_element(a.begin(), a.end()) - a.begin()), after);
}

std::string spec_greedy_name(const ::testing::TestParamInfo<std::tuple<const char*, int, double>>& i) {
  std::string s = std::get<0>(i.param);
  std::replace(s.begin(), s.end(), '-', '_');
  const double p = std::get<2>(i.param);
  return s + "_k" + std::to_string(std::get<1>(i.param)) +
         (p < 0 ? std::string("_own_drafts") : "_p" + std::to_string(int(p * 100 + 0.5)));
}

INSTANTIATE_TEST_SUITE_P(Cpu, SpecGreedy,
                         ::testing::Values(std::make_tuple("cpu", 1, -1.0), std::make_tuple("cpu", 3, -1.0),
                                           std::make_tuple("cpu", 2, 0.7), std::make_tuple("cpu", 4, 0.86),
                                           std::make_tuple("cpu-ref", 3, 0.7)),
                         spec_greedy_name);
// cuda: the verify rows run as decode steps
INSTANTIATE_TEST_SUITE_P(Cuda, SpecGreedy,
                         ::testing::Values(std::make_tuple("cuda", 1, -1.0), std::make_tuple("cuda", 2, -1.0),
                                           std::make_tuple("cuda", 3, -1.0), std::make_tuple("cuda", 4, -1.0),
                                           std::make_tuple("cuda", 1, 0.5), std::make_tuple("cuda", 2, 0.7),
                                           std::make_tuple("cuda", 3, 0.86), std::make_tuple("cuda", 4, 1.0)),
                         spec_greedy_name);

TEST(SpecAccept, RuleKeepsTheTargetDistribution) {
  const std::vector<double> p = {0.05, 0.4, 0.3, 0.2, 0.05}, q = {0.3, 0.1, 0.3, 0.0, 0.3};
  std::vector<double> counts(p.size(), 0.0);
  uint64_t c = 0;
  auto u = [&] { return double(samp::philox64(99, c++) >> 11) * (1.0 / 9007199254740992.0); };
  constexpr int N = 200000;
  for (int i = 0; i < N; ++i) {
    const int32_t d = draw_index(q, u());
    const double u1 = u(), u2 = u();
    const int32_t t = spec_accept(p, q, d, u1, u2);
    counts[size_t(t < 0 ? d : t)] += 1;
  }
  std::vector<double> expected(p.size());
  for (size_t i = 0; i < p.size(); ++i) expected[i] = p[i] * N;
  const auto [stat, df] = chi2(expected, counts);
  EXPECT_LT(stat, chi2_critical(df)) << "chi-square " << stat << " df " << df;
  // a rule that always accepts would give q: far outside
  const auto [bad, df2] = chi2(expected, [&] {
    std::vector<double> o(q.size());
    for (size_t i = 0; i < q.size(); ++i) o[i] = q[i] * N;
    return o;
  }());
  EXPECT_GT(bad, chi2_critical(df2));
}

class SpecSampled : public ::testing::TestWithParam<std::tuple<const char*, double>> {};

// The joint distribution of the first two sampled tokens after the prompt (temperature 1, top-k 4) with speculation
// (one draft: accepted -> bonus, rejected -> correction then a plain step) against the exact target computed with
// plain forwards.
TEST_P(SpecSampled, JointOfTwoTokensMatchesPlainSampling) {
  const auto [backend, p_emu] = GetParam();
  if (!test_backend_usable(backend)) GTEST_SKIP() << "no CUDA device";
  auto be = make_test_backend(backend, fx().w);
  const int V = be->config().vocab;
  Prefilled pf = prefill(*be, 256);
  SamplerParams sp;
  sp.temperature = 1.0f;
  sp.top_k = 4;
  sp.has_seed = true;
  const int32_t first = 7;  // a fixed first token after the prompt
  StepSampler ref_ss(sp, fx().prompt, V);
  ref_ss.record(first);
  // exact target: p1 after `first`, p2 after (first, a)
  auto st1 = pf.st->clone();
  std::vector<float> l1(static_cast<size_t>(V)), l2(static_cast<size_t>(V));
  be->forward(*st1, &first, 1, 1, l1.data(), ForwardOptions{});
  std::vector<double> p1, p2;
  ref_ss.distribution(l1.data(), p1);
  std::map<std::pair<int, int>, double> expect;
  int32_t top = 0;
  for (int a = 0; a < V; ++a) {
    if (p1[size_t(a)] <= 0) continue;
    if (p1[size_t(a)] > p1[size_t(top)]) top = a;
    auto st2 = st1->clone();
    be->forward(*st2, &a, 1, 1, l2.data(), ForwardOptions{});
    StepSampler s2 = ref_ss;
    s2.record(a);
    s2.distribution(l2.data(), p2);
    for (int b = 0; b < V; ++b)
      if (p2[size_t(b)] > 0) expect[{a, b}] = p1[size_t(a)] * p2[size_t(b)];
  }
  const std::vector<int32_t> oracle = {top, top};
  constexpr int N = 1500;
  std::map<std::pair<int, int>, double> seen;
  int64_t accepted = 0;
  for (int i = 0; i < N; ++i) {
    sp.seed = uint64_t(1000 + i);
    StepSampler ss(sp, fx().prompt, V);
    ss.record(first);
    auto st = pf.st->clone();
    std::vector<int32_t> out;
    MtpConfig mc;
    mc.k = 1;
    mc.auto_off = false;
    mc.seed = uint64_t(i) * 7919u;
    if (p_emu >= 0) {
      mc.oracle = &oracle;
      mc.accept_p = p_emu;
    }
    MtpStats ms;
    mtp_decode(*be, *st, ss, first, 2, [&](int32_t id) { out.push_back(id); return true; }, nullptr, &pf.carry, mc,
               &ms);
    ASSERT_EQ(out.size(), 2u);
    seen[{out[0], out[1]}] += 1;
    accepted += ms.accepted;
  }
  std::vector<double> e, o;
  for (const auto& [key, pr] : expect) {
    e.push_back(pr * N);
    o.push_back(seen.count(key) ? seen[key] : 0.0);
  }
  double outside = 0;
  for (const auto& [key, c] : seen)
    if (!expect.count(key)) outside += c;
  EXPECT_EQ(outside, 0) << "tokens outside the target's support";
  const auto [stat, df] = chi2(e, o);
  std::printf("[ %s sampled p_emu=%.2f ] chi-square %.2f (df %d, 0.1%% point %.2f), drafts accepted %lld of %d\n",
              backend, p_emu, stat, df, chi2_critical(df), static_cast<long long>(accepted), N);
  EXPECT_LT(stat, chi2_critical(df));
  if (p_emu >= 0) {
    EXPECT_GT(accepted, N / 10);
  }
}

// -1: the MTP block's own drafts (sampled from its distribution); 1: every draft the target's most likely token.
std::string spec_sampled_name(const ::testing::TestParamInfo<std::tuple<const char*, double>>& i) {
  std::string s = std::get<0>(i.param);
  std::replace(s.begin(), s.end(), '-', '_');
  return s + (std::get<1>(i.param) < 0 ? "_own_drafts" : "_emulated_target_argmax");
}
INSTANTIATE_TEST_SUITE_P(Cpu, SpecSampled,
                         ::testing::Values(std::make_tuple("cpu", -1.0), std::make_tuple("cpu", 1.0)),
                         spec_sampled_name);
INSTANTIATE_TEST_SUITE_P(Cuda, SpecSampled,
                         ::testing::Values(std::make_tuple("cuda", -1.0), std::make_tuple("cuda", 1.0)),
                         spec_sampled_name);

namespace {
struct GenOut {
  GenResult r;
  std::string text;
};
GenOut run(Generator& g, const GenJob& j, std::function<bool()> cancelled = nullptr) {
  GenOut o;
  o.r = g.run(j, [&](GenChunk&& c) { o.text += c.delta.content; }, cancelled);
  return o;
}
}  // namespace

class SpecGenerator : public ::testing::TestWithParam<const char*> {};

TEST_P(SpecGenerator, CacheAndCancellationKeepWorking) {
  if (!test_backend_usable(GetParam())) GTEST_SKIP() << "no CUDA device";
  auto be = make_test_backend(GetParam(), fx().w);
  auto tok = Tokenizer::load(kTiny + "tokenizer.json");
  GenJob j;
  j.prompt = fx().prompt;
  j.max_tokens = 60;
  j.sampling.temperature = 0;
  Generator plain(*be, *tok, nullptr, 512);
  const GenOut want = run(plain, j);
  SessionCache cache(64 << 20);
  Generator spec(*be, *tok, &cache, 512);
  spec.set_mtp(3);
  const GenOut a = run(spec, j);
  EXPECT_EQ(a.text, want.text);
  EXPECT_EQ(a.r.completion_tokens, want.r.completion_tokens);
  EXPECT_GT(a.r.mtp_drafted, 0);
  spec.save_reply_snapshot();
  const GenOut b = run(spec, j);  // the prompt from the cache: no carried hidden state, a plain first step
  EXPECT_EQ(b.r.cached_tokens, int(j.prompt.size()));
  EXPECT_EQ(b.text, want.text);
  // a next turn that extends prompt + reply resumes from the reply snapshot
  spec.save_reply_snapshot();
  GenJob j2 = j;
  for (int32_t id : tok->encode(a.text)) j2.prompt.push_back(id);
  for (int32_t id : tok->encode(" and more")) j2.prompt.push_back(id);
  const GenOut c = run(spec, j2);
  const GenOut c_plain = run(plain, j2);
  EXPECT_EQ(c.text, c_plain.text);
  // cancelled mid-decode: throws, and the next run is unaffected
  int seen = 0;
  EXPECT_THROW(run(spec, j, [&] { return ++seen > 20; }), Cancelled);
  const GenOut d = run(spec, j);
  EXPECT_EQ(d.text, want.text);
  // a backend without MTP weights refuses
  auto w2 = load_model(kTiny + "model-bf16");
  auto be2 = make_test_backend(GetParam(), w2);
  Generator g2(*be2, *tok, nullptr, 512);
  EXPECT_THROW(g2.set_mtp(2), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, SpecGenerator, ::testing::Values("cpu", "cuda"));
