// The CUDA backend's speculative-decoding pieces on the tiny fixture with its MTP block (the bf16 model, and the
// rows on the 4-bit model too): verify + accept(m) leave the
// device state (KV rows, DeltaNet recurrent and conv states, position) equal to the state of forwarding only the m
// kept tokens, bit for bit (the verify runs plain decoding's numerics, the decode kernels given all rows at once or one step after another:
// against plain decode steps); clone / assign carry the MTP cache; the greedy output of a speculative decode does not depend on k
// or on how many drafts are accepted. The logits and the 520-token comparison with plain decoding are in
// test_mtp.cpp / test_speculative.cpp.
#include <gtest/gtest.h>

#ifdef LILY_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "cuda/cuda_state.h"
#include "engine/speculative.h"
#include "engine/step_sampler.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "test_backends.h"
#include "tiny_mtp_fixture.h"

using namespace lily;

namespace {

const std::string kTiny = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";

// the parameter: "rows" / "decode_steps" on the bf16 model, or "rows_mlx4" (the rows on the 4-bit layout, whose
// GEMVs and lm_head take the int8-x path)
bool mlx4(const std::string& param) { return param == "rows_mlx4"; }
test::TinyMtp& fx_of(const std::string& param) { return test::tiny_mtp(mlx4(param) ? "model-mlx-4bit" : "model-bf16"); }

// The device state on the host: KV rows [0, pos) of every slab, S, conv, MTP KV rows [0, mtp_rows).
struct HostState {
  int pos = 0, mtp_rows = 0;
  std::vector<uint16_t> kv, mtp_kv;
  std::vector<float> S, conv;
};
std::vector<uint16_t> kv_rows(const uint16_t* d, size_t nslab, int max_ctx, int rows, int hd) {
  std::vector<uint16_t> h(nslab * size_t(rows) * size_t(hd));
  if (rows > 0 && nslab > 0) {
    const size_t used = size_t(rows) * size_t(hd) * 2;
    EXPECT_EQ(cudaMemcpy2D(h.data(), used, d, size_t(max_ctx) * size_t(hd) * 2, used, nslab, cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return h;
}
HostState snap(const SeqState& s, const ModelConfig& c) {
  const auto& st = dynamic_cast<const cuda::CudaState&>(s);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostState h;
  h.pos = st.pos;
  h.mtp_rows = st.mtp_rows;
  h.kv = kv_rows(st.kv, st.n_kv_slabs, st.max_ctx, st.pos, c.head_dim);
  if (st.mtp_kv) h.mtp_kv = kv_rows(st.mtp_kv, size_t(2) * c.n_kv_heads, st.max_ctx, st.mtp_rows, c.head_dim);
  h.S.resize(st.s_bytes / 4);
  h.conv.resize(st.conv_bytes / 4);
  EXPECT_EQ(cudaMemcpy(h.S.data(), st.S, st.s_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.conv.data(), st.conv, st.conv_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}
void expect_same(const HostState& a, const HostState& b, const std::string& what) {
  EXPECT_EQ(a.pos, b.pos) << what;
  EXPECT_EQ(a.mtp_rows, b.mtp_rows) << what;
  EXPECT_TRUE(a.kv == b.kv) << what << ": KV rows differ";
  EXPECT_TRUE(a.mtp_kv == b.mtp_kv) << what << ": MTP KV rows differ";
  EXPECT_TRUE(a.S == b.S) << what << ": DeltaNet recurrent states differ";
  EXPECT_TRUE(a.conv == b.conv) << what << ": DeltaNet conv states differ";
}
double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

class CudaMtp : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    if (!test_backend_usable("cuda")) GTEST_SKIP() << "no CUDA device";
    // "rows": the verify's rows through each decode kernel at once, in one graph (the default); "decode_steps":
    // direct launches, the rows one plain step after another (the reference)
    const bool steps = std::string(GetParam()) == "decode_steps";
    if (steps) setenv("LILY_CUDA_LAUNCH", "direct", 1);
    be = make_test_backend("cuda", fx().w);
    if (steps) unsetenv("LILY_CUDA_LAUNCH");
    ASSERT_TRUE(be->mtp_available());
    V = be->config().vocab;
  }
  std::unique_ptr<SeqState> prefilled(int ctx) {
    auto st = be->new_state(ctx);
    std::vector<float> logits(static_cast<size_t>(V));
    be->forward(*st, fx().prompt.data(), int(fx().prompt.size()), 1, logits.data(), ForwardOptions{});
    return st;
  }
  test::TinyMtp& fx() { return fx_of(GetParam()); }
  std::unique_ptr<Backend> be;
  int V = 0;
};

// verify [cur, wrong drafts] then accept(m): the state is the one that forwarded only the first m tokens.
TEST_P(CudaMtp, AcceptLeavesThePlainState) {
  const ModelConfig& c = be->config();
  auto base = prefilled(128);
  const int32_t run[8] = {17, 400, 33, 2900, 5, 1234, 77, 3001};
  for (int n : {2, 4, 8})  // n rows in one launch sequence (up to kMaxRows); each accepted length of 2 and 4, some of 8
  for (int m = 1; m <= n; m += n == 8 ? 3 : 1) {
    auto plain = base->clone();
    std::vector<float> plain_logits(size_t(m) * size_t(V));
    for (int i = 0; i < m; ++i)  // plain decoding: one decode step per token
      be->forward(*plain, &run[i], 1, 1, plain_logits.data() + size_t(i) * size_t(V), ForwardOptions{});
    auto spec = base->clone();
    std::vector<float> vlog(size_t(n) * size_t(V)), hid(size_t(n) * size_t(c.hidden));
    auto undo = be->verify(*spec, run, n, vlog.data(), hid.data());
    for (int i = 0; i < m; ++i) {
      const double d = max_abs_diff(&vlog[size_t(i) * size_t(V)], &plain_logits[size_t(i) * size_t(V)], size_t(V));
      std::printf("[ %s m=%d row %d ] verify(%d) vs plain |dlogit| %.3g\n", GetParam(), m, i, n, d);
      EXPECT_EQ(d, 0.0) << "n " << n << " m " << m << " row " << i;
    }
    for (float h : hid) ASSERT_TRUE(std::isfinite(h));
    be->accept(*spec, *undo, m);
    expect_same(snap(*spec, c), snap(*plain, c), "n " + std::to_string(n) + " m " + std::to_string(m));
    // and it decodes on exactly like the plain state
    const int32_t nxt = 99;
    std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
    be->forward(*spec, &nxt, 1, 1, la.data(), ForwardOptions{});
    be->forward(*plain, &nxt, 1, 1, lb.data(), ForwardOptions{});
    EXPECT_EQ(max_abs_diff(la.data(), lb.data(), size_t(V)), 0.0) << "m " << m;
  }
  auto st = base->clone();
  auto other = base->clone();
  std::vector<float> vlog(size_t(2) * size_t(V));
  auto undo = be->verify(*st, run, 2, vlog.data(), nullptr);
  EXPECT_THROW(be->accept(*st, *undo, 3), Error);
  EXPECT_THROW(be->accept(*st, *undo, 0), Error);
  EXPECT_THROW(be->accept(*other, *undo, 1), Error);  // another state's undo
  auto undo2 = be->verify(*other, run, 2, vlog.data(), nullptr);
  EXPECT_THROW(be->accept(*st, *undo, 1), Error);  // a verify ran since: its snapshots are gone
  be->accept(*other, *undo2, 1);
  EXPECT_EQ(other->pos, base->pos + 1);
  const int32_t bad[2] = {1, V};
  EXPECT_THROW(be->verify(*st, bad, 2, vlog.data(), nullptr), Error);
}

// clone and assign carry the MTP cache: the next chained MTP step gives the same logits from each copy.
TEST_P(CudaMtp, CloneAndAssignCarryTheMtpCache) {
  const ModelConfig& c = be->config();
  const int L = int(fx().prompt.size()), H = c.hidden;
  auto st = be->new_state(96);
  std::vector<float> hidden(size_t(L) * size_t(H)), logits(static_cast<size_t>(V));
  ForwardOptions fo;
  fo.on_hidden = [&](const float* h, int row0, int n) {
    std::copy(h, h + size_t(n) * size_t(H), hidden.begin() + std::ptrdiff_t(row0) * H);
  };
  be->forward(*st, fx().prompt.data(), L, 1, logits.data(), fo);
  be->mtp_forward(*st, fx().prompt.data() + 1, hidden.data(), L - 1, 0, 0, nullptr, nullptr);
  ASSERT_EQ(be->mtp_rows(*st), L - 1);
  auto cl = st->clone();
  auto as = be->new_state(96);
  as->assign(*st);
  EXPECT_EQ(as->pos, st->pos);
  EXPECT_EQ(be->mtp_rows(*as), L - 1);
  expect_same(snap(*cl, c), snap(*st, c), "clone");
  expect_same(snap(*as, c), snap(*st, c), "assign");
  const int32_t next = 42;
  const float* h_last = hidden.data() + size_t(L - 1) * size_t(H);
  std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V)), d(static_cast<size_t>(V));
  be->mtp_forward(*st, &next, h_last, 1, L - 1, 1, a.data(), nullptr);
  be->mtp_forward(*cl, &next, h_last, 1, L - 1, 1, b.data(), nullptr);
  be->mtp_forward(*as, &next, h_last, 1, L - 1, 1, d.data(), nullptr);
  EXPECT_EQ(max_abs_diff(a.data(), b.data(), size_t(V)), 0.0);
  EXPECT_EQ(max_abs_diff(a.data(), d.data(), size_t(V)), 0.0);
  auto small = be->new_state(64);
  EXPECT_THROW(small->assign(*st), Error);
  EXPECT_THROW(be->mtp_truncate(*st, L + 5), Error);
  const int32_t bad = -1;
  EXPECT_THROW(be->mtp_forward(*st, &bad, h_last, 1, L, 1, a.data(), nullptr), Error);
}

// Greedy speculative decoding over 300 tokens gives one output whatever k and the acceptance (own drafts, none
// accepted, all accepted): every token comes from a verify row of the same path.
TEST_P(CudaMtp, GreedyOutputIndependentOfDrafts) {
  constexpr int kSteps = 300;
  SamplerParams sp;
  sp.temperature = 0;
  // plain greedy (for the oracle of the emulation)
  std::vector<int32_t> plain;
  {
    auto st = be->new_state(512);
    std::vector<float> logits(static_cast<size_t>(V));
    be->forward(*st, fx().prompt.data(), int(fx().prompt.size()), 1, logits.data(), ForwardOptions{});
    StepSampler ss(sp, fx().prompt, V);
    plain.push_back(ss.sample(logits.data()));
    be->decode_sample(*st, ss, plain[0], kSteps, [&](int32_t id) { plain.push_back(id); return true; });
  }
  const std::vector<int32_t> oracle(plain.begin() + 1, plain.end());
  auto spec = [&](int k, double p) {
    auto st = be->new_state(512);
    MtpCarry carry;
    ForwardOptions fo;
    fo.on_hidden = mtp_prefill_hook(*be, *st, fx().prompt, carry);
    std::vector<float> logits(static_cast<size_t>(V));
    be->forward(*st, fx().prompt.data(), int(fx().prompt.size()), 1, logits.data(), fo);
    StepSampler ss(sp, fx().prompt, V);
    std::vector<int32_t> out{ss.sample(logits.data())};
    MtpConfig mc;
    mc.k = k;
    mc.auto_off = false;
    if (p >= 0) {
      mc.oracle = &oracle;
      mc.accept_p = p;
    }
    mtp_decode(*be, *st, ss, out[0], kSteps, [&](int32_t id) { out.push_back(id); return true; }, nullptr, &carry,
               mc, nullptr);
    return out;
  };
  const std::vector<int32_t> a = spec(1, -1.0), b = spec(3, 0.0), d = spec(4, 1.0), e = spec(2, 0.7);
  size_t agree = 0;
  while (agree < a.size() && agree < plain.size() && a[agree] == plain[agree]) ++agree;
  std::printf("[ %s ] speculative greedy agrees with plain decoding on the first %zu of %zu tokens\n", GetParam(),
              agree, plain.size());
  EXPECT_EQ(agree, plain.size());  // plain decoding's kernels
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, d);
  EXPECT_EQ(a, e);
}

INSTANTIATE_TEST_SUITE_P(Verify, CudaMtp, ::testing::Values("rows", "decode_steps", "rows_mlx4"),
                         [](const auto& i) { return std::string(i.param); });

TEST(CudaMtpLoad, WithoutWeightsSaysWhy) {
  if (!test_backend_usable("cuda")) GTEST_SKIP() << "no CUDA device";
  auto be = make_test_backend("cuda", load_model(kTiny + "model-bf16"));
  EXPECT_FALSE(be->mtp_available());
  EXPECT_NE(be->mtp_unavailable_reason().find("not loaded"), std::string::npos);
  EXPECT_FALSE(be->mtp_default_off_reason().empty());  // decode-step verify: exact, never faster
  auto st = be->new_state(64);
  const int32_t id = 5;
  std::vector<float> h(size_t(be->config().hidden));
  EXPECT_THROW(be->mtp_forward(*st, &id, h.data(), 1, 0, 0, nullptr, nullptr), Error);
  std::vector<float> l(size_t(be->config().vocab));
  EXPECT_THROW(be->verify(*st, &id, 1, l.data(), nullptr), Error);
}

}  // namespace

#endif  // LILY_HAVE_CUDA
