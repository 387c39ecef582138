#include "bench/bench_runner.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "bench/bench_math.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "engine/step_sampler.h"

namespace lily {

namespace {

using Clock = std::chrono::steady_clock;

struct RunOut {
  double prefill_s = 0, decode_s = 0;
  int32_t first = 0;  // the greedy token after the prompt (decode's first input)
  std::vector<int32_t> generated;
};

RunOut run_once(Backend& be, const std::vector<int32_t>& prompt, int steps, const ForwardOptions& fo) {
  const int V = be.config().vocab;
  std::vector<float> logits(static_cast<size_t>(V));
  auto st = be.new_state(int(prompt.size()) + steps + 1);
  RunOut r;
  auto t0 = Clock::now();
  be.forward(*st, prompt.data(), int(prompt.size()), 1, logits.data(), fo);
  int32_t next = argmax(logits.data(), V);
  r.first = next;
  auto t1 = Clock::now();
  r.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  // Greedy decode through decode_argmax: a backend that keeps the ids on the device (CUDA) never stalls the host
  // per token; the default implementation is the forward + argmax loop this replaced.
  r.generated.resize(size_t(steps));
  if (steps > 0) be.decode_argmax(*st, steps, next, r.generated.data());
  r.decode_s = std::chrono::duration<double>(Clock::now() - t1).count();
  return r;
}

// Decode from an unfilled context of n positions (timing only, see bench_runner.h).
RunOut run_unfilled(Backend& be, int n, int32_t first_id, int steps) {
  auto st = be.new_state(n + steps + 1);
  be.fill_context_for_timing(*st, n);
  RunOut r;
  r.generated.resize(size_t(steps));
  auto t0 = Clock::now();
  if (steps > 0) be.decode_argmax(*st, steps, first_id, r.generated.data());
  r.decode_s = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

// Sampled decode of `steps` tokens from a context of n zeros (timing only), tok/s: the backend's decode_sample or
// (host) Backend::decode_sample's default, after a 4-step warm-up on the same state (graph capture on first use).
double run_sampled(Backend& be, int n, int32_t first_id, int steps, float temp, int top_k, float top_p, bool host) {
  SamplerParams sp;
  sp.temperature = temp;
  sp.top_k = top_k;
  sp.top_p = top_p;
  sp.has_seed = true;
  sp.seed = 1;
  StepSampler smp(sp, {}, be.config().vocab);
  auto st = be.new_state(n + steps + 8);
  be.fill_context_for_timing(*st, n);
  auto cont = [](int32_t) { return true; };
  auto run = [&](int k) {
    if (host) return be.Backend::decode_sample(*st, smp, first_id, k, cont);  // the host sampler (the default)
    return be.decode_sample(*st, smp, first_id, k, cont);
  };
  run(4);
  const auto t0 = Clock::now();
  const int got = run(steps);
  return got / std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<BenchLengthResult> run_bench(Backend& be, const BenchOptions& opt) {
  if (opt.reps < 1) throw Error("--reps must be at least 1");
  if (opt.prefill_chunk < 0) throw Error("--prefill-chunk must be at least 1 (0: the backend's default)");
  std::set<int> all(opt.prefill_lengths.begin(), opt.prefill_lengths.end());
  all.insert(opt.decode_contexts.begin(), opt.decode_contexts.end());
  const auto& cfg = be.config();
  if (cfg.max_pos > 0)
    for (int n : all)
      if (n + opt.decode_steps + 1 > cfg.max_pos)
        throw Error("length " + std::to_string(n) + " + " + std::to_string(opt.decode_steps) +
                    " decode steps exceeds the model's max_position_embeddings " + std::to_string(cfg.max_pos));
  ForwardOptions fo;
  fo.prefill_chunk = opt.prefill_chunk;
  const int total = int(all.size()) * (opt.reps + 1);
  int done = 0;
  std::vector<BenchLengthResult> out;
  for (int n : all) {
    BenchLengthResult r;
    r.length = n;
    r.prefill_measured = std::count(opt.prefill_lengths.begin(), opt.prefill_lengths.end(), n) > 0;
    r.decode_measured = std::count(opt.decode_contexts.begin(), opt.decode_contexts.end(), n) > 0;
    const auto prompt = bench_prompt(n, cfg.vocab);
    const int steps = r.decode_measured ? opt.decode_steps : 0;
    const bool unfilled = opt.unfilled_context && !r.prefill_measured;
    if (opt.progress) opt.progress("warm-up " + length_label(n), done, total);
    if (unfilled) run_unfilled(be, n, prompt.back(), std::min(steps, opt.warmup_decode));
    else run_once(be, prompt, std::min(steps, opt.warmup_decode), fo);
    ++done;
    RunOut last;
    for (int rep = 0; rep < opt.reps; ++rep) {
      if (opt.progress)
        opt.progress(length_label(n) + " rep " + std::to_string(rep + 1) + "/" + std::to_string(opt.reps), done, total);
      auto o = unfilled ? run_unfilled(be, n, prompt.back(), steps) : run_once(be, prompt, steps, fo);
      if (r.prefill_measured) r.prefill_s.push_back(o.prefill_s);
      if (r.decode_measured) {
        r.decode_s.push_back(o.decode_s);
        r.digests.push_back(fnv1a_ids(o.generated));
        if (r.digests.back() != r.digests.front()) r.digest_consistent = false;
      }
      ++done;
      last = std::move(o);
    }
    if (opt.mtp_k > 0 && r.decode_measured && !unfilled) {
      if (opt.progress) opt.progress("mtp " + length_label(n), done, total);
      r.mtp = bench_mtp_at(be, prompt, last.first, last.generated, opt.mtp_k, opt.mtp_accept, opt.prefill_chunk);
      r.mtp_measured = true;
    }
    if (opt.sampled && r.decode_measured) {
      if (opt.progress) opt.progress("sampled " + length_label(n), done, total);
      r.sampled_t1 = run_sampled(be, n, prompt.back(), steps, 1.0f, 0, 1.0f, false);
      r.sampled_k20 = run_sampled(be, n, prompt.back(), steps, 0.7f, 20, 0.9f, false);
      r.sampled_host_k20 = run_sampled(be, n, prompt.back(), steps, 0.7f, 20, 0.9f, true);
    }
    out.push_back(std::move(r));
  }
  if (opt.progress) opt.progress("done", total, total);
  return out;
}

}  // namespace lily
