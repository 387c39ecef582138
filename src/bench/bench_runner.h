// The benchmark protocol of `lily bench`, batch 1 on one Backend:
//  for each length n in prefill_lengths ∪ decode_contexts:
//    warm-up: one prefill of exactly n prompt tokens on a fresh state plus `warmup_decode` decode steps;
//    then `reps` times, on a fresh state: prefill the n deterministic prompt ids (timed when n is a prefill
//    length; ends when the last position's logits are on the host; next id = argmax), then exactly decode_steps
//    (64 unless --decode-steps) greedy decode steps each feeding the previous argmax (timed when n is a decode
//    context); the FNV-1a digest of the generated ids must be the same in every repetition.
//  With sampled, each decode context is also timed through decode_sample on a context of zeros (as unfilled):
//  the backend's sampler (on the device for CUDA) at T = 1 over the whole vocabulary and at T = 0.7 with top-k 20
//  and top-p 0.9, and the host sampler (Backend::decode_sample's default) at the latter; one timed run each after
//  a 4-step warm-up (the graph captures), decode_steps steps.
//  With unfilled_context, a decode context that is not also a prefill length is not prefilled: the state is
//  given n positions of zeros (Backend::fill_context_for_timing) and the decode is timed from there (timing only:
//  a decode step's cost does not depend on the values; the ids are meaningless but still repeat per rep).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/bench_mtp.h"
#include "engine/backend.h"

namespace lily {

struct BenchOptions {
  std::vector<int> prefill_lengths;
  std::vector<int> decode_contexts;
  int reps = 3;
  int decode_steps = 64;
  int warmup_decode = 4;
  int prefill_chunk = 0;  // 0: the backend's default
  bool unfilled_context = false;  // --decode-context unfilled (see above)
  bool sampled = false;           // --sampled (see above)
  // --mtp K: speculative decoding timed at each prefilled decode context (bench/bench_mtp.h); mtp_accept: the
  // emulated acceptance probabilities (--mtp-accept), empty: the MTP block's own drafts.
  int mtp_k = 0;
  std::vector<double> mtp_accept;
  // called at the start of each phase: ("prefill 4K rep 2/3", done phases, total phases)
  std::function<void(const std::string& what, int done, int total)> progress;
};

struct BenchLengthResult {
  int length = 0;
  bool prefill_measured = false, decode_measured = false;
  std::vector<double> prefill_s;       // seconds per rep
  std::vector<double> decode_s;        // seconds for all decode steps per rep
  std::vector<uint64_t> digests;       // per rep
  bool digest_consistent = true;
  // sampled decode (BenchOptions::sampled), tok/s: backend sampler at T = 1; at T = 0.7, top-k 20, top-p 0.9;
  // the host sampler at the latter. 0: not measured
  double sampled_t1 = 0, sampled_k20 = 0, sampled_host_k20 = 0;
  bool mtp_measured = false;
  MtpBenchLength mtp;             // BenchOptions::mtp_k > 0, prefilled decode contexts
};

std::vector<BenchLengthResult> run_bench(Backend& be, const BenchOptions& opt);

}  // namespace lily
