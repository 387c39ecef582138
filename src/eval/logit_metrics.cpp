#include "eval/logit_metrics.h"

#include <algorithm>
#include <cmath>

#include "bench/bench_math.h"
#include "core/error.h"

namespace lily {

void log_softmax(const float* x, int n, double* out) {
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  double lse = m + std::log(s);
  for (int i = 0; i < n; ++i) out[i] = double(x[i]) - lse;
}

double kl_divergence(const float* ref, const float* ours, int n) {
  std::vector<double> lp(static_cast<size_t>(n)), lq(static_cast<size_t>(n));
  log_softmax(ref, n, lp.data());
  log_softmax(ours, n, lq.data());
  double kl = 0;
  for (int i = 0; i < n; ++i) kl += std::exp(lp[size_t(i)]) * (lp[size_t(i)] - lq[size_t(i)]);
  return std::max(kl, 0.0);
}

double neg_log_prob(const float* x, int n, int target) {
  if (target < 0 || target >= n) throw Error("token id " + std::to_string(target) + " outside the vocabulary");
  double m = x[0];
  for (int i = 1; i < n; ++i) m = std::max(m, double(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - m);
  return m + std::log(s) - double(x[target]);
}

double perplexity(double nll_sum, int64_t n) { return n > 0 ? std::exp(nll_sum / double(n)) : 0.0; }

LogitComparison compare_logits(const float* ref, const float* ours, int L, int V, const std::vector<int32_t>& next) {
  LogitComparison c;
  c.positions = L;
  double sq = 0, kl_sum = 0, nll_ref = 0, nll_ours = 0;
  int agree = 0;
  for (int t = 0; t < L; ++t) {
    const float* r = ref + size_t(t) * size_t(V);
    const float* o = ours + size_t(t) * size_t(V);
    for (int v = 0; v < V; ++v) {
      if (!std::isfinite(o[v])) ++c.non_finite;
      double d = double(r[v]) - double(o[v]);
      sq += d * d;
      c.max_abs_err = std::max(c.max_abs_err, std::fabs(d));
    }
    agree += argmax(r, V) == argmax(o, V);
    double kl = kl_divergence(r, o, V);
    kl_sum += kl;
    c.max_kl = std::max(c.max_kl, kl);
    if (size_t(t) < next.size()) {
      nll_ref += neg_log_prob(r, V, next[size_t(t)]);
      nll_ours += neg_log_prob(o, V, next[size_t(t)]);
      ++c.scored;
    }
  }
  if (L > 0) {
    c.top1_agreement = double(agree) / L;
    c.rms_err = std::sqrt(sq / (double(L) * V));
    c.mean_kl = kl_sum / L;
  }
  c.ppl_ref = perplexity(nll_ref, c.scored);
  c.ppl_ours = perplexity(nll_ours, c.scored);
  return c;
}

}  // namespace lily
