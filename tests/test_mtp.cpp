// Multi-token prediction on the tiny fixture: the MTP weights load (own checkpoint, --mtp-from another, clear errors),
// the MTP logits equal the torch reference (tools/fixtures/mtp_fixture.py) on cpu-ref and cpu, and verify / accept
// leave the state where plain decoding leaves it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "app/make_backend.h"
#include "cli/args.h"
#include "cli/mtp_args.h"
#include "core/error.h"
#include "cpu/cpu_state.h"
#include "engine/backend.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "quant/quantize_checkpoint.h"
#include "server/metrics.h"
#include "test_backends.h"

using namespace lily;

namespace {

const std::string kTiny = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";

std::vector<float> ref_f32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->nbytes / sizeof(float));
}
std::vector<int32_t> ref_i32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  const int32_t* p = static_cast<const int32_t*>(t->data);
  return std::vector<int32_t>(p, p + t->nbytes / sizeof(int32_t));
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

int argmax(const float* x, int n) { return int(std::max_element(x, x + n) - x); }

}  // namespace

TEST(MtpLoad, FromOwnCheckpoint) {
  auto w = load_model(kTiny + "model-bf16");
  EXPECT_EQ(w->mtp_tensors.size(), 65u);
  EXPECT_EQ(w->mtp, nullptr) << "loaded only when asked";
  load_mtp(*w);
  ASSERT_NE(w->mtp, nullptr);
  EXPECT_EQ(w->mtp->fc.rows, 128);
  EXPECT_EQ(w->mtp->fc.cols, 256);
  EXPECT_TRUE(w->mtp->layer.is_full);
  EXPECT_EQ(w->mtp->layer.moe.gate.e.size(), 16u);  // one tensor per expert in the file
}

TEST(MtpLoad, FromAnotherDirectoryOpensOnlyItsShard) {
  auto w = load_model(kTiny + "model-mlx-4bit");
  EXPECT_TRUE(w->mtp_tensors.empty());
  try {
    load_mtp(*w);
    FAIL() << "the MLX conversion has no mtp.* tensors";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mtp.fc.weight"), std::string::npos) << e.what();
  }
  load_mtp(*w, kTiny + "model-bf16");
  ASSERT_NE(w->mtp, nullptr);
  EXPECT_EQ(w->mtp->source, kTiny + "model-bf16");
  // only the shard that holds mtp.* is listed
  CheckpointFiles f(kTiny + "model-bf16", [](const std::string& n) { return n.rfind("mtp.", 0) == 0; });
  EXPECT_EQ(f.files_searched().find("model-00001"), std::string::npos) << f.files_searched();
  EXPECT_NE(f.files_searched().find("model-mtp.safetensors"), std::string::npos) << f.files_searched();
  EXPECT_EQ(f.names().size(), 65u);
}

TEST(MtpLoad, MismatchedModelIsRefused) {
  // The 4-bit MLX fixture's config says hidden 128 too, so a config with another hidden size is made here.
  namespace fs = std::filesystem;
  const fs::path d = fs::temp_directory_path() / "lily_mtp_mismatch";
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(kTiny + "model-bf16")) fs::copy(e.path(), d / e.path().filename());
  std::string cfg;
  {
    std::FILE* f = std::fopen((d / "config.json").c_str(), "rb");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) cfg.append(buf, n);
    std::fclose(f);
  }
  const size_t at = cfg.find("\"hidden_size\": 128");
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, 18, "\"hidden_size\": 256");
  {
    std::FILE* f = std::fopen((d / "config.json").c_str(), "wb");
    std::fwrite(cfg.data(), 1, cfg.size(), f);
    std::fclose(f);
  }
  auto w = load_model(kTiny + "model-mlx-4bit");
  try {
    load_mtp(*w, d.string());
    FAIL() << "hidden 256 against 128 must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden 256"), std::string::npos) << e.what();
  }
  fs::remove_all(d);
}

TEST(MtpLoad, BackendWithoutWeightsSaysWhy) {
  auto w = load_model(kTiny + "model-bf16");
  auto be = make_backend("cpu-ref", w);
  EXPECT_FALSE(be->mtp_available());
  EXPECT_NE(be->mtp_unavailable_reason().find("not loaded"), std::string::npos);
  auto st = be->new_state(64);
  const int32_t id = 5;
  const float h[128] = {};
  EXPECT_THROW(be->mtp_forward(*st, &id, h, 1, 0, 0, nullptr, nullptr), Error);
}

class MtpLogits : public ::testing::TestWithParam<const char*> {};

// Teacher forced over the prompt (the main model's own hidden states, MTP rows 0..L-2), then the 4-step chain.
TEST_P(MtpLogits, MatchTorchReference) {
  const std::string backend = GetParam();
  if (!test_backend_usable(backend)) GTEST_SKIP() << "no CUDA device";
  // cuda: the main model's hidden states and the block run through the batched prefill (split precision: 0.02 on
  // the main logits vs transformers, test_cuda_prefill_model.cpp); the decode-step bound of test_cuda_model.cpp
  const double tol = backend == "cpu-ref" ? 1e-3 : backend == "cpu" ? 2e-2 : 5e-2;
  auto w = load_model(kTiny + "model-bf16");
  load_mtp(*w);
  auto be = make_test_backend(backend, w);
  ASSERT_TRUE(be->mtp_available());
  auto ref = SafetensorsFile::open(kTiny + "reference-mtp.safetensors");
  auto main_ref = SafetensorsFile::open(kTiny + "reference-bf16.safetensors");
  const std::vector<int32_t> ids = ref_i32(*main_ref, "prompt_ids");
  const std::vector<int32_t> greedy = ref_i32(*main_ref, "greedy_ids");
  const std::vector<float> tf = ref_f32(*ref, "tf_logits");
  const std::vector<float> chain_ref = ref_f32(*ref, "chain_logits");
  const std::vector<int32_t> chain_ids = ref_i32(*ref, "chain_ids");
  const int L = static_cast<int>(ids.size()), V = w->cfg.vocab, H = w->cfg.hidden;
  ASSERT_EQ(tf.size(), size_t(L - 1) * size_t(V));
  auto st = be->new_state(256);
  std::vector<float> hidden(size_t(L) * size_t(H)), logits(static_cast<size_t>(V));
  ForwardOptions fo;
  fo.on_hidden = [&](const float* h, int row0, int n) {
    std::memcpy(hidden.data() + size_t(row0) * size_t(H), h, size_t(n) * size_t(H) * sizeof(float));
  };
  be->forward(*st, ids.data(), L, 1, logits.data(), fo);
  std::vector<float> ours(size_t(L - 1) * size_t(V));
  be->mtp_forward(*st, ids.data() + 1, hidden.data(), L - 1, 0, L - 1, ours.data(), nullptr);
  EXPECT_EQ(be->mtp_rows(*st), L - 1);
  const double d_tf = max_abs_diff(ours.data(), tf.data(), ours.size());
  int top1 = 0;
  for (int r = 0; r < L - 1; ++r)
    top1 += argmax(&ours[size_t(r) * size_t(V)], V) == argmax(&tf[size_t(r) * size_t(V)], V);
  std::printf("[ %s mtp teacher-forced ] max |dlogit| %.3g, top-1 %d/%d\n", backend.c_str(), d_tf, top1, L - 1);
  EXPECT_LE(d_tf, tol);
  EXPECT_EQ(top1, L - 1);
  {  // the same rows a few at a time (as the drafts come: on CUDA through the decode kernels, not the prefill's)
    auto st2 = be->new_state(256);
    be->forward(*st2, ids.data(), L, 1, logits.data(), ForwardOptions{});
    std::vector<float> part(size_t(L - 1) * size_t(V));
    for (int r0 = 0; r0 < L - 1; r0 += 5) {
      const int n = std::min(5, L - 1 - r0);
      be->mtp_forward(*st2, ids.data() + 1 + r0, hidden.data() + size_t(r0) * size_t(H), n, r0, n,
                      part.data() + size_t(r0) * size_t(V), nullptr);
    }
    const double d_part = max_abs_diff(part.data(), tf.data(), part.size());
    int top1p = 0;
    for (int r = 0; r < L - 1; ++r)
      top1p += argmax(&part[size_t(r) * size_t(V)], V) == argmax(&tf[size_t(r) * size_t(V)], V);
    std::printf("[ %s mtp teacher-forced, 5 rows a call ] max |dlogit| %.3g, top-1 %d/%d\n", backend.c_str(), d_part,
                top1p, L - 1);
    EXPECT_LE(d_part, tol);
    EXPECT_EQ(top1p, L - 1);
  }
  // the chain: its first input pairs the last prompt position with the first greedy token
  ASSERT_EQ(argmax(logits.data(), V), greedy[0]);
  std::vector<float> h(hidden.end() - H, hidden.end()), hout(static_cast<size_t>(H)), step(static_cast<size_t>(V));
  int32_t next = greedy[0];
  double d_chain = 0;
  for (size_t j = 0; j < chain_ids.size(); ++j) {
    be->mtp_forward(*st, &next, h.data(), 1, L - 1 + int(j), 1, step.data(), hout.data());
    d_chain = std::max(d_chain, max_abs_diff(step.data(), &chain_ref[j * size_t(V)], size_t(V)));
    next = argmax(step.data(), V);
    EXPECT_EQ(next, chain_ids[j]) << "chain step " << j;
    h = hout;
  }
  std::printf("[ %s mtp chain ] max |dlogit| %.3g\n", backend.c_str(), d_chain);
  EXPECT_LE(d_chain, tol);
  be->mtp_truncate(*st, L - 1);
  EXPECT_EQ(be->mtp_rows(*st), L - 1);
  EXPECT_THROW(be->mtp_truncate(*st, L), Error);
}

std::string backend_name(const ::testing::TestParamInfo<const char*>& i) {
  std::string s = i.param;
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

INSTANTIATE_TEST_SUITE_P(Cpu, MtpLogits, ::testing::Values("cpu-ref", "cpu"), backend_name);
INSTANTIATE_TEST_SUITE_P(Cuda, MtpLogits, ::testing::Values("cuda"), backend_name);

class MtpVerify : public ::testing::TestWithParam<const char*> {};

// verify [cur, wrong drafts] then accept(m): the state equals the one that forwarded only the first m tokens.
TEST_P(MtpVerify, AcceptRewindsToPlainState) {
  auto w = load_model(kTiny + "model-bf16");
  auto be = make_backend(GetParam(), w);
  auto main_ref = SafetensorsFile::open(kTiny + "reference-bf16.safetensors");
  const std::vector<int32_t> ids = ref_i32(*main_ref, "prompt_ids");
  const int V = w->cfg.vocab;
  auto base = be->new_state(128);
  std::vector<float> logits(static_cast<size_t>(V));
  be->forward(*base, ids.data(), int(ids.size()), 1, logits.data(), ForwardOptions{});
  const int32_t run[4] = {17, 400, 33, 2900};
  for (int m = 1; m <= 4; ++m) {
    auto plain = base->clone();
    std::vector<float> plain_logits(static_cast<size_t>(V));
    for (int i = 0; i < m; ++i) be->forward(*plain, &run[i], 1, 1, plain_logits.data(), ForwardOptions{});
    auto spec = base->clone();
    std::vector<float> vlog(size_t(4) * size_t(V));
    auto undo = be->verify(*spec, run, 4, vlog.data(), nullptr);
    // the verify rows are the plain step's logits
    EXPECT_LE(max_abs_diff(&vlog[size_t(m - 1) * size_t(V)], plain_logits.data(), size_t(V)), 1e-5) << "m " << m;
    be->accept(*spec, *undo, m);
    ASSERT_EQ(spec->pos, plain->pos);
    const auto& a = dynamic_cast<const CpuState&>(*spec);
    const auto& b = dynamic_cast<const CpuState&>(*plain);
    for (size_t l = 0; l < a.layers.size(); ++l) {
      ASSERT_EQ(a.layers[l].k.size(), b.layers[l].k.size()) << "layer " << l;
      EXPECT_LE(max_abs_diff(a.layers[l].k.data(), b.layers[l].k.data(), a.layers[l].k.size()), 1e-6) << l;
      EXPECT_LE(max_abs_diff(a.layers[l].v.data(), b.layers[l].v.data(), a.layers[l].v.size()), 1e-6) << l;
      EXPECT_LE(max_abs_diff(a.layers[l].conv.data(), b.layers[l].conv.data(), a.layers[l].conv.size()), 1e-6) << l;
      EXPECT_LE(max_abs_diff(a.layers[l].S.data(), b.layers[l].S.data(), a.layers[l].S.size()), 1e-6) << l;
    }
    // and it decodes on exactly like the plain state
    const int32_t nxt = 99;
    std::vector<float> la(static_cast<size_t>(V)), lb(static_cast<size_t>(V));
    be->forward(*spec, &nxt, 1, 1, la.data(), ForwardOptions{});
    be->forward(*plain, &nxt, 1, 1, lb.data(), ForwardOptions{});
    EXPECT_LE(max_abs_diff(la.data(), lb.data(), size_t(V)), 1e-5) << "m " << m;
  }
  auto st = base->clone();
  std::vector<float> vlog(size_t(2) * size_t(V));
  auto undo = be->verify(*st, run, 2, vlog.data(), nullptr);
  EXPECT_THROW(be->accept(*st, *undo, 3), Error);
  EXPECT_THROW(be->accept(*st, *undo, 0), Error);
  // the rewind points belong to the last verify: an older record is refused, not applied with another's states
  auto other = base->clone();
  std::vector<float> vlog4(size_t(4) * size_t(V));
  auto undo2 = be->verify(*other, run, 4, vlog4.data(), nullptr);
  EXPECT_THROW(be->accept(*st, *undo, 1), Error);
  auto twin = other->clone();  // same position, not the verified state
  EXPECT_THROW(be->accept(*twin, *undo2, 2), Error);
  be->accept(*other, *undo2, 2);
  EXPECT_EQ(other->pos, base->pos + 2);
}

INSTANTIATE_TEST_SUITE_P(Cpu, MtpVerify, ::testing::Values("cpu-ref", "cpu"), backend_name);

class MtpArgmax : public ::testing::TestWithParam<const char*> {};

// The greedy forms (verify_argmax, mtp_argmax: CUDA's from its lm_head kernel, the others' from the logits on the
// host) give the argmax of the logits the logit forms give, and the same hidden rows.
TEST_P(MtpArgmax, GreedyFormsPickTheLogitsArgmax) {
  if (!test_backend_usable(GetParam())) GTEST_SKIP() << "no CUDA device";
  auto w = load_model(kTiny + "model-bf16");
  load_mtp(*w);
  auto be = make_test_backend(GetParam(), w);
  auto main_ref = SafetensorsFile::open(kTiny + "reference-bf16.safetensors");
  const std::vector<int32_t> ids = ref_i32(*main_ref, "prompt_ids");
  const int V = w->cfg.vocab, H = w->cfg.hidden, L = int(ids.size());
  auto base = be->new_state(128);
  std::vector<float> logits(static_cast<size_t>(V));
  be->forward(*base, ids.data(), L, 1, logits.data(), ForwardOptions{});
  const int32_t run[6] = {17, 400, 33, 2900, 5, 77};
  for (int n : {1, 3, 5}) {
    auto a = base->clone(), b = base->clone();
    std::vector<float> vlog(size_t(n) * size_t(V)), ha(size_t(n) * size_t(H)), hb(size_t(n) * size_t(H));
    std::vector<int32_t> got(static_cast<size_t>(n), -1);
    be->verify(*a, run, n, vlog.data(), ha.data());
    be->verify_argmax(*b, run, n, got.data(), hb.data());
    for (int i = 0; i < n; ++i) EXPECT_EQ(got[size_t(i)], argmax(&vlog[size_t(i) * size_t(V)], V)) << n << " " << i;
    EXPECT_EQ(max_abs_diff(ha.data(), hb.data(), ha.size()), 0.0) << n;
    // the MTP block on those rows (positions L .. L + n - 1, each with the token after it)
    std::vector<float> ml(static_cast<size_t>(V)), oa(size_t(n) * size_t(H)), ob(size_t(n) * size_t(H));
    be->mtp_forward(*a, run + 1, ha.data(), n, L, 1, ml.data(), oa.data());
    const int32_t top = be->mtp_argmax(*b, run + 1, hb.data(), n, L, ob.data());
    EXPECT_EQ(top, argmax(ml.data(), V)) << n;
    EXPECT_EQ(max_abs_diff(oa.data(), ob.data(), oa.size()), 0.0) << n;
    EXPECT_EQ(be->mtp_rows(*a), be->mtp_rows(*b));
  }
}

INSTANTIATE_TEST_SUITE_P(All, MtpArgmax, ::testing::Values("cpu-ref", "cpu", "cuda"), backend_name);

TEST(MtpArgs, DefaultOnWithWeightsAndClearErrors) {
  auto with = load_model(kTiny + "model-bf16");
  Args a;
  MtpChoice c = load_mtp_for(a, *with);
  EXPECT_EQ(c.k, kDefaultMtpDrafts);
  EXPECT_FALSE(c.asked);
  EXPECT_NE(with->mtp, nullptr);
  auto without = load_model(kTiny + "model-mlx-4bit");
  c = load_mtp_for(a, *without);
  EXPECT_EQ(c.k, 0) << "no mtp.* and no --mtp-from: off";
  EXPECT_EQ(without->mtp, nullptr);
  Args two;
  two.flags.emplace("mtp", "2");
  EXPECT_THROW(load_mtp_for(two, *without), Error);
  two.flags.emplace("mtp-from", kTiny + "model-bf16");
  c = load_mtp_for(two, *without);
  EXPECT_EQ(c.k, 2);
  EXPECT_TRUE(c.asked);
  EXPECT_NE(without->mtp, nullptr);
  Args off;
  off.flags.emplace("mtp", "off");
  auto w3 = load_model(kTiny + "model-bf16");
  EXPECT_EQ(load_mtp_for(off, *w3).k, 0);
  EXPECT_EQ(w3->mtp, nullptr) << "--mtp off loads nothing";
  off.flags.emplace("mtp-from", kTiny + "model-bf16");
  EXPECT_THROW(load_mtp_for(off, *w3), Error);
  for (const char* bad : {"0", "9", "x"}) {
    Args b;
    b.flags.emplace("mtp", bad);
    EXPECT_THROW(load_mtp_for(b, *w3), Error) << bad;
  }
  // the default turns itself off on a backend without the weights; an explicit K there is an error
  auto be = make_backend("cpu-ref", load_model(kTiny + "model-bf16"));
  EXPECT_EQ(mtp_for_backend(MtpChoice{3, false}, *be, "test"), 0);
  EXPECT_THROW(mtp_for_backend(MtpChoice{3, true}, *be, "test"), Error);
  // backends with the weights: one that keeps it off unless asked (Backend::mtp_default_off_reason), one with its
  // own default count (Backend::mtp_default_drafts)
  struct MtpOnly : Backend {
    ModelConfig c;
    std::string off;
    int drafts = 3;
    std::string name() const override { return "mtp-only"; }
    const ModelConfig& config() const override { return c; }
    std::unique_ptr<SeqState> new_state(int) override { return nullptr; }
    void forward(SeqState&, const int32_t*, int, int, float*, const ForwardOptions&) override {}
    bool mtp_available() const override { return true; }
    std::string mtp_default_off_reason() const override { return off; }
    int mtp_default_drafts() const override { return drafts; }
  } off_be, on4;
  off_be.off = "not faster here";
  on4.drafts = 4;
  EXPECT_EQ(mtp_for_backend(MtpChoice{3, false}, off_be, "test"), 0);
  EXPECT_EQ(mtp_for_backend(MtpChoice{2, true}, off_be, "test"), 2);
  auto wm = load_model(kTiny + "model-bf16");
  load_mtp(*wm);
  auto on_be = make_backend("cpu-ref", wm);
  EXPECT_EQ(mtp_for_backend(MtpChoice{3, false}, *on_be, "test"), on_be->mtp_default_drafts());
  EXPECT_EQ(on_be->mtp_default_drafts(), 1) << "the CPU's default: one draft";
  EXPECT_EQ(mtp_for_backend(MtpChoice{3, true}, *on_be, "test"), 3) << "an explicit K stays";
  EXPECT_EQ(mtp_for_backend(MtpChoice{3, false}, on4, "test"), 4);
  EXPECT_EQ(mtp_for_backend(MtpChoice{2, true}, on4, "test"), 2);
}

TEST(MtpArgs, MetricsCountDrafts) {
  Metrics m;
  m.count_mtp(30, 12, false);
  m.count_mtp(10, 0, true);
  const std::string r = m.render();
  EXPECT_NE(r.find("lily_mtp_draft_tokens_total 40"), std::string::npos) << r;
  EXPECT_NE(r.find("lily_mtp_accepted_tokens_total 12"), std::string::npos) << r;
  EXPECT_NE(r.find("lily_mtp_switched_off_total 1"), std::string::npos) << r;
}

// lily quantize copies mtp.* unchanged: the 4-bit output runs the same MTP block (same weights; its inputs then come
// from the quantised main model, so only the shapes and the loading are compared here, plus the fc bytes).
TEST(MtpLoad, KeptByQuantize) {
  namespace fs = std::filesystem;
  const fs::path out = fs::temp_directory_path() / "lily_mtp_quantized";
  fs::remove_all(out);
  auto src = load_model(kTiny + "model-bf16");
  quantize_checkpoint(*src, kTiny + "model-bf16", out.string(), QuantizeOptions{});
  auto q = load_model(out.string());
  EXPECT_EQ(q->mtp_tensors.size(), 65u);
  load_mtp(*q);
  load_mtp(*src);
  ASSERT_NE(q->mtp, nullptr);
  EXPECT_EQ(q->mtp->fc.format_name(), src->mtp->fc.format_name());
  EXPECT_EQ(std::memcmp(q->mtp->fc.w, src->mtp->fc.w, q->mtp->fc.bytes()), 0);
  EXPECT_EQ(q->mtp->layer.moe.down.e.size(), 16u);
  auto be = make_backend("cpu", q);
  EXPECT_TRUE(be->mtp_available());
  fs::remove_all(out);
}
