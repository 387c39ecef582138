// The step sampler: the sampling algorithm the CUDA decode step runs on the device after lm_head
// (src/cuda/decode/sampler.cu), and its exact host reference (this class), which also serves backends without a device
// sampler (Backend::decode_sample's default) and the first token of a reply (sampled from the prefill logits).
//
// Algorithm, per token (docs/cuda-decode.md "Sampling on the device"):
//  1. a_i = logit_i after repetition / presence / frequency penalties from a token table (bit 31: in the prompt,
//     low bits: times generated); NaN -> -inf. mx = max a_i.
//  2. Greedy (temperature <= 0 or top_k == 1) or non-finite mx: argmax of a (lowest id on ties).
//  3. Candidates: key(a_i) >= the k-th largest key (top-k; ties at the k-th value are all kept) and
//     a_i >= mx + T log(min_p) (min-p).
//  4. Weights W_i = floor(2^32 exp((a_i - mx) / T)) (integers: sums are exact in any order).
//  5. top-p: the largest key t such that the candidates with key >= t hold at least max(1, floor(top_p Z)) of the
//     candidates' mass Z; candidates with key < t are dropped (ties at t kept).
//  6. r = Philox4x32-10(seed, step) (64 bits), target = floor(Z' r / 2^64) with Z' the remaining mass; the token
//     is the first candidate in id order whose running sum of W exceeds target (inverse CDF in id order).
// Different from the host Sampler (std::mt19937_64, probability-sorted order), so a seed gives other tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/sample_math.h"
#include "engine/sampler.h"

namespace lily {

class StepSampler {
 public:
  // The seed is p.seed when p.has_seed, else drawn at random. `prompt` marks the table for the repetition penalty.
  StepSampler(const SamplerParams& p, const std::vector<int32_t>& prompt, int vocab);

  // Token for the raw logits[0..vocab) at the current step; pure (nothing recorded).
  int32_t pick(const float* logits) const;
  // Records a token as generated: table[id] += 1, step += 1.
  void record(int32_t id);
  int32_t sample(const float* logits) {
    const int32_t id = pick(logits);
    record(id);
    return id;
  }

  // The distribution pick() draws from at the current step (steps 1-5): prob[i] = W_i / Z over the candidates, 0
  // elsewhere; one-hot at the argmax when greedy. Used by speculative sampling (engine/speculative.h).
  void distribution(const float* logits, std::vector<double>& prob) const;

  // The algorithm on explicit inputs: `r` is the step's 64 random bits (philox64(seed, step)).
  static int32_t pick(const float* logits, const uint32_t* table, int vocab, const samp::StepParams& p, uint64_t r);
  static samp::StepParams make_params(const SamplerParams& p, int vocab, uint64_t seed);

  // Steps 1-5: the candidates' weights w [V] (0 for the others), their sum z (0 when greedy or the maximum is not
  // finite) and the argmax.
  static int32_t weights(const float* logits, const uint32_t* table, int vocab, const samp::StepParams& p,
                         std::vector<uint64_t>& w, uint64_t& z);

  const samp::StepParams& params() const { return sp_; }
  const std::vector<uint32_t>& table() const { return table_; }
  uint64_t step() const { return step_; }
  int vocab() const { return vocab_; }

 private:
  samp::StepParams sp_;
  int vocab_;
  uint64_t step_ = 0;
  std::vector<uint32_t> table_;
};

}  // namespace lily
