#include "bench/bench_mtp.h"

#include <algorithm>
#include <chrono>

#include "engine/speculative.h"
#include "engine/step_sampler.h"

namespace lily {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Prefilled {
  std::unique_ptr<SeqState> st;
  MtpCarry carry;
};

Prefilled prefill(Backend& be, const std::vector<int32_t>& prompt, int extra, int chunk) {
  Prefilled p;
  p.st = be.new_state(int(prompt.size()) + extra);
  std::vector<float> logits(size_t(be.config().vocab));
  ForwardOptions fo;
  fo.prefill_chunk = chunk;
  fo.on_hidden = mtp_prefill_hook(be, *p.st, prompt, p.carry);
  be.forward(*p.st, prompt.data(), int(prompt.size()), 1, logits.data(), fo);
  return p;
}

}  // namespace

MtpBenchLength bench_mtp_at(Backend& be, const std::vector<int32_t>& prompt, int32_t first_id,
                            const std::vector<int32_t>& plain, int k, const std::vector<double>& accept_ps,
                            int prefill_chunk) {
  MtpBenchLength out;
  out.k = k;
  const int steps = static_cast<int>(plain.size());
  const int V = be.config().vocab, H = be.config().hidden;
  SamplerParams greedy;
  greedy.temperature = 0;
  {  // step costs at this context
    Prefilled p = prefill(be, prompt, steps + k + 8, prefill_chunk);
    // as greedy decoding runs them: a plain step with its argmax, the verify and the drafts in their greedy forms
    std::vector<float> hid(size_t(k + 1) * size_t(H));
    std::vector<float> h(static_cast<size_t>(H));
    std::vector<int32_t> ids(size_t(k + 1), first_id), got(size_t(k + 1));
    for (int i = 1; i <= k && i - 1 < steps; ++i) ids[size_t(i)] = plain[size_t(i - 1)];
    std::vector<double> t_plain, t_verify, t_draft;
    for (int rep = 0; rep < 9; ++rep) {
      auto s1 = p.st->clone();
      auto t0 = Clock::now();
      be.decode_argmax(*s1, 1, first_id, got.data());
      const double a = ms_since(t0);
      auto s2 = p.st->clone();
      t0 = Clock::now();
      auto undo = be.verify_argmax(*s2, ids.data(), k + 1, got.data(), hid.data());
      const double b = ms_since(t0);
      auto s3 = p.st->clone();
      std::copy(p.carry.hidden.begin(), p.carry.hidden.end(), h.begin());
      t0 = Clock::now();
      for (int j = 0; j < k; ++j) be.mtp_argmax(*s3, &ids[size_t(j)], h.data(), 1, s3->pos - 1 + j, h.data());
      const double c = ms_since(t0);
      if (rep == 0) continue;  // warm-up
      t_plain.push_back(a);
      t_verify.push_back(b);
      t_draft.push_back(c);
    }
    out.plain_step_ms = median(t_plain);
    out.verify_step_ms = median(t_verify);
    out.draft_ms = median(t_draft);
  }
  std::vector<double> ps = accept_ps.empty() ? std::vector<double>{-1.0} : accept_ps;
  for (double pa : ps) {
    Prefilled p = prefill(be, prompt, steps + k + 8, prefill_chunk);
    StepSampler ss(greedy, prompt, V);
    ss.record(first_id);
    MtpConfig mc;
    mc.k = k;
    mc.auto_off = false;  // the bench measures the speculative path itself
    if (pa >= 0) {
      mc.oracle = &plain;
      mc.accept_p = pa;
    }
    MtpStats ms;
    std::vector<int32_t> got;
    got.reserve(size_t(steps));
    const auto t0 = Clock::now();
    mtp_decode(be, *p.st, ss, first_id, steps, [&](int32_t id) { got.push_back(id); return true; }, nullptr, &p.carry,
               mc, &ms);
    const double s = ms_since(t0) / 1000.0;
    MtpBenchRun r;
    r.accept_p = pa;
    r.tok_s = steps / std::max(s, 1e-9);
    r.drafted = ms.drafted;
    r.accepted = ms.accepted;
    r.rounds = ms.rounds;
    r.identical = got == plain;
    out.runs.push_back(r);
  }
  return out;
}

}  // namespace lily
