// The synthetic model's random MTP block (synth/synthetic_mtp.h): shapes of the real block, deterministic in the
// seed, and runnable: speculative decoding on the CPU backend drafts with it and keeps plain greedy output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "app/make_backend.h"
#include "engine/speculative.h"
#include "engine/step_sampler.h"
#include "synth/synthetic_model.h"
#include "synth/synthetic_mtp.h"

using namespace lily;

TEST(SynthMtp, ShapesAndDeterminism) {
  auto w = make_synthetic("tiny", 7);
  ASSERT_EQ(w->mtp, nullptr);
  add_synthetic_mtp(*w, 7);
  ASSERT_NE(w->mtp, nullptr);
  const MtpWeights& m = *w->mtp;
  const int H = w->cfg.hidden;
  EXPECT_EQ(m.fc.rows, H);
  EXPECT_EQ(m.fc.cols, 2 * H);
  EXPECT_EQ(m.pre_norm_e.size(), size_t(H));
  EXPECT_EQ(m.pre_norm_h.size(), size_t(H));
  EXPECT_EQ(m.norm.size(), size_t(H));
  EXPECT_TRUE(m.layer.is_full);
  EXPECT_EQ(m.layer.moe.gate.e.size(), size_t(w->cfg.n_experts));
  EXPECT_EQ(m.layer.attn.q.rows, w->cfg.q_proj_rows());
  EXPECT_FALSE(w->mtp_tensors.empty());
  auto w2 = make_synthetic("tiny", 7);
  add_synthetic_mtp(*w2, 7);
  EXPECT_EQ(std::memcmp(m.fc.w, w2->mtp->fc.w, size_t(H) * size_t(2 * H) * 2), 0);
  EXPECT_EQ(m.norm, w2->mtp->norm);
  auto w3 = make_synthetic("tiny", 8);
  add_synthetic_mtp(*w3, 8);
  EXPECT_NE(std::memcmp(m.fc.w, w3->mtp->fc.w, size_t(H) * size_t(2 * H) * 2), 0);
}

TEST(SynthMtp, DraftsRunAndGreedyStaysPlain) {
  auto w = make_synthetic("tiny", 3);
  add_synthetic_mtp(*w, 3);
  auto be = make_backend("cpu", w);
  ASSERT_TRUE(be->mtp_available());
  const int V = be->config().vocab;
  const std::vector<int32_t> prompt = {11, 200, 3000, 45, 7};
  SamplerParams sp;
  sp.temperature = 0;
  auto run = [&](int k) {
    auto st = be->new_state(128);
    MtpCarry carry;
    ForwardOptions fo;
    if (k > 0) fo.on_hidden = mtp_prefill_hook(*be, *st, prompt, carry);
    std::vector<float> logits(static_cast<size_t>(V));
    be->forward(*st, prompt.data(), int(prompt.size()), 1, logits.data(), fo);
    for (float x : logits) EXPECT_TRUE(std::isfinite(x));
    StepSampler ss(sp, prompt, V);
    std::vector<int32_t> out{ss.sample(logits.data())};
    MtpConfig mc;
    mc.k = k;
    mc.auto_off = false;
    MtpStats stats;
    mtp_decode(*be, *st, ss, out[0], 40, [&](int32_t id) { out.push_back(id); return true; }, nullptr, &carry, mc,
               &stats);
    if (k > 0) {
      EXPECT_GT(stats.drafted, 0);
    }
    return out;
  };
  EXPECT_EQ(run(2), run(0));
}
