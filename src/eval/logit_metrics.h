// Arithmetic for comparing two sets of logits over the same positions (teacher-forced consistency):
// log-softmax, KL(ref || ours), top-1 agreement, logit errors, perplexity on next tokens.
#pragma once
#include <cstdint>
#include <vector>

namespace lily {

// out[i] = x[i] - logsumexp(x), computed in double.
void log_softmax(const float* x, int n, double* out);
// KL(p || q) = sum p (log p - log q) with p = softmax(ref), q = softmax(ours).
double kl_divergence(const float* ref, const float* ours, int n);
// -log softmax(x)[target]
double neg_log_prob(const float* x, int n, int target);

struct LogitComparison {
  int positions = 0;
  double top1_agreement = 0;   // fraction of positions whose argmax agrees
  double max_abs_err = 0;      // max |ref - ours| over all logits
  double rms_err = 0;          // sqrt(mean (ref - ours)^2)
  double mean_kl = 0, max_kl = 0;
  // perplexity of each model on next tokens: exp(mean -log p(next[t] | position t)); 0 when next is empty
  double ppl_ref = 0, ppl_ours = 0;
  int scored = 0;              // positions with a next token
  int64_t non_finite = 0;      // inf / NaN values among `ours` (the other figures are meaningless when > 0)
};

// ref, ours: [L, V] row-major. next: the token following each position (next[t] = ids[t+1]); it may hold
// fewer than L entries (the last position has none).
LogitComparison compare_logits(const float* ref, const float* ours, int L, int V, const std::vector<int32_t>& next);

// Perplexity from a sum of negative log-likelihoods over n tokens.
double perplexity(double nll_sum, int64_t n);

}  // namespace lily
