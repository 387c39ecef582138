// Host-side token sampling from one row of logits: penalties, temperature, top-k, top-p, min-p and a
// seeded RNG (std::mt19937_64: the same seed and logits give the same tokens), greedy at temperature 0.
// Also computes the chosen token's log-probability and the top-N alternatives (model distribution).
#pragma once
#include <cstdint>
#include <functional>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace lily {

struct SamplerParams {
  float temperature = 1.0f;         // <= 0: greedy (argmax)
  float top_p = 1.0f;               // (0, 1]: smallest set whose probability mass reaches top_p
  int top_k = 0;                    // 0: off
  float min_p = 0.0f;               // [0, 1]: drop tokens with p < min_p * p_max
  float presence_penalty = 0.0f;    // subtracted once from every token already generated
  float frequency_penalty = 0.0f;   // subtracted per occurrence in the generated tokens
  float repetition_penalty = 1.0f;  // > 0; divides positive / multiplies negative logits of seen tokens
                                    // (prompt and generated tokens)
  bool has_seed = false;
  uint64_t seed = 0;                // used when has_seed; otherwise a random seed is drawn
  int top_logprobs = 0;             // alternatives to report per token (0..20)
};

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;             // log-softmax of the unmodified logits
};

struct SampleResult {
  int32_t id = 0;
  float logprob = 0.0f;             // of `id` under the model distribution
  std::vector<TokenLogprob> top;    // [top_logprobs] most likely tokens, most likely first
  bool rejected = false;            // a filter was given and no token of the vocabulary passed it
};

// Constrained decoding: may this token come next? Called only for tokens the sampler is about to pick,
// in the order it would pick them, so it can be expensive.
using TokenFilter = std::function<bool(int32_t)>;

class Sampler {
 public:
  // `prompt` seeds the repetition-penalty history.
  Sampler(const SamplerParams& p, const std::vector<int32_t>& prompt);

  // Picks the next token from logits[0..vocab). `logits` is not modified.
  // With `allow`, the token is one that passes it: greedy takes the best allowed token; sampling draws,
  // and a drawn token that is not allowed gets probability 0 and the rest is drawn from again (at most
  // kFilterDraws times), then the candidates (after top-k / min-p / top-p) are scanned most likely first,
  // then the whole vocabulary. The RNG use depends only on the logits and the filter's answers, so a
  // seed still gives the same tokens. When nothing passes, `rejected` is set and `id` is the argmax.
  SampleResult sample(const float* logits, int vocab, const TokenFilter& allow = {});
  static constexpr int kFilterDraws = 16;
  // Records a token as generated (penalty history). sample() does not call it.
  void accept(int32_t id);

  const SamplerParams& params() const { return p_; }

 private:
  void adjust(const float* logits, int vocab);  // work_ = logits with penalties, NaN -> -inf
  // First token of idx_[0..n) that `allow` passes, in descending work_ order (ties: lower id); -1 if none.
  int32_t first_allowed(size_t n, const TokenFilter& allow);

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int> generated_;   // token id -> times generated
  std::unordered_set<int32_t> seen_;             // prompt or generated ids (repetition penalty)
  std::vector<float> work_;                      // [vocab] scratch: adjusted logits
  std::vector<int32_t> idx_;                     // [vocab] scratch: candidate ids
};

// The n most likely tokens of a logit row with their log-softmax values (most likely first); the row's
// log-sum-exp goes to *lse_out when given.
std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int n, float* lse_out = nullptr);

}  // namespace lily
