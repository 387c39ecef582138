#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace lily {
namespace {

float row_lse(const float* x, int n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i] - mx));
  return mx + static_cast<float>(std::log(s));
}

// Uniform double in [0, 1) from 53 random bits: identical on every platform for one seed.
double uniform01(std::mt19937_64& g) { return static_cast<double>(g() >> 11) * 0x1.0p-53; }

}  // namespace

std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int n, float* lse_out) {
  const float lse = row_lse(logits, vocab);
  if (lse_out) *lse_out = lse;
  n = std::clamp(n, 0, vocab);
  std::vector<TokenLogprob> out;
  if (n == 0) return out;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.push_back({idx[i], logits[idx[i]] - lse});
  return out;
}

Sampler::Sampler(const SamplerParams& p, const std::vector<int32_t>& prompt) : p_(p) {
  rng_.seed(p.has_seed ? p.seed : std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32));
  if (p_.repetition_penalty != 1.0f) seen_.insert(prompt.begin(), prompt.end());
}

void Sampler::accept(int32_t id) {
  ++generated_[id];
  if (p_.repetition_penalty != 1.0f) seen_.insert(id);
}

void Sampler::adjust(const float* logits, int vocab) {
  work_.assign(logits, logits + vocab);
  // Penalties on the raw logits (OpenAI presence/frequency; HF-style multiplicative repetition).
  if (p_.repetition_penalty != 1.0f && p_.repetition_penalty > 0.0f) {
    for (int32_t id : seen_) {
      if (id < 0 || id >= vocab) continue;
      float& l = work_[id];
      l = l > 0 ? l / p_.repetition_penalty : l * p_.repetition_penalty;
    }
  }
  if (p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) {
    for (const auto& [id, cnt] : generated_) {
      if (id < 0 || id >= vocab) continue;
      work_[id] -= p_.presence_penalty + p_.frequency_penalty * static_cast<float>(cnt);
    }
  }
  // NaN logits never win.
  for (float& l : work_)
    if (std::isnan(l)) l = -std::numeric_limits<float>::infinity();
}

int32_t Sampler::first_allowed(size_t n, const TokenFilter& allow) {
  auto desc = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
  // Sort a growing prefix: the answer is usually among the first few dozen.
  size_t done = 0, m = std::min<size_t>(n, 64);
  while (done < n) {
    std::partial_sort(idx_.begin() + static_cast<long>(done), idx_.begin() + static_cast<long>(m),
                      idx_.begin() + static_cast<long>(n), desc);
    for (size_t i = done; i < m; ++i)
      if (allow(idx_[i])) return idx_[i];
    done = m;
    m = std::min(n, m * 4);
  }
  return -1;
}

SampleResult Sampler::sample(const float* logits, int vocab, const TokenFilter& allow) {
  SampleResult r;
  float lse = 0;
  r.top = top_logprobs(logits, vocab, p_.top_logprobs, &lse);
  adjust(logits, vocab);

  auto argmax = [&] {
    int32_t best = 0;
    for (int i = 1; i < vocab; ++i)
      if (work_[i] > work_[best]) best = i;
    return best;
  };
  auto all_ids = [&] {
    idx_.resize(static_cast<size_t>(vocab));
    for (int i = 0; i < vocab; ++i) idx_[i] = i;
  };
  // Greedy under the filter, over the whole vocabulary (work_ must hold the adjusted logits).
  auto best_allowed = [&] {
    const int32_t best = argmax();
    if (allow(best)) return best;
    all_ids();
    const int32_t id = first_allowed(idx_.size(), allow);
    if (id >= 0) return id;
    r.rejected = true;
    return best;
  };

  if (p_.temperature <= 0.0f || p_.top_k == 1) {
    r.id = allow ? best_allowed() : argmax();
  } else {
    all_ids();
    auto desc = [&](int32_t a, int32_t b) { return work_[a] > work_[b] || (work_[a] == work_[b] && a < b); };
    size_t n = idx_.size();
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < n) {
      std::nth_element(idx_.begin(), idx_.begin() + p_.top_k, idx_.end(), desc);
      n = static_cast<size_t>(p_.top_k);
      std::sort(idx_.begin(), idx_.begin() + static_cast<long>(n), desc);
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n; ++i) mx = std::max(mx, work_[idx_[i]]);
    if (!std::isfinite(mx)) {
      r.id = allow ? best_allowed() : argmax();
    } else {
      // Probabilities (unnormalised) of the candidates at temperature T, stored back into work_.
      const float invT = 1.0f / p_.temperature;
      double total = 0;
      for (size_t i = 0; i < n; ++i) {
        float& w = work_[idx_[i]];
        w = static_cast<float>(std::exp(static_cast<double>(w - mx) * invT));
        total += w;
      }
      // min-p: relative to the most likely candidate (whose weight is 1).
      if (p_.min_p > 0.0f) {
        size_t k = 0;
        for (size_t i = 0; i < n; ++i)
          if (work_[idx_[i]] >= p_.min_p) idx_[k++] = idx_[i];
        n = k;
        total = 0;
        for (size_t i = 0; i < n; ++i) total += work_[idx_[i]];
      }
      // top-p: sort a growing prefix until it holds top_p of the mass (usually a few dozen tokens).
      if (p_.top_p < 1.0f && n > 1) {
        const double target = static_cast<double>(p_.top_p) * total;
        size_t m = std::min<size_t>(n, 64);
        for (;;) {
          std::partial_sort(idx_.begin(), idx_.begin() + static_cast<long>(m), idx_.begin() + static_cast<long>(n),
                            desc);
          double cum = 0;
          size_t keep = 0;
          while (keep < m && cum < target) cum += work_[idx_[keep++]];
          if (cum >= target || m == n) {
            n = std::max<size_t>(keep, 1);
            break;
          }
          m = std::min(n, m * 4);
        }
        total = 0;
        for (size_t i = 0; i < n; ++i) total += work_[idx_[i]];
      }
      // One draw from the candidates' weights; rounding past the end picks the last positive weight.
      auto draw = [&] {
        const double u = uniform01(rng_) * total;
        double acc = 0;
        int32_t id = idx_[n - 1];
        for (size_t i = 0; i < n; ++i) {
          const float w = work_[idx_[i]];
          if (w <= 0) continue;
          acc += w;
          id = idx_[i];
          if (u < acc) break;
        }
        return id;
      };
      if (!allow) {
        r.id = draw();
      } else {
        r.id = -1;
        for (int t = 0; t < kFilterDraws && total > 0; ++t) {
          const int32_t id = draw();
          if (allow(id)) {
            r.id = id;
            break;
          }
          total -= work_[id];
          work_[id] = 0;
        }
        if (r.id < 0) r.id = first_allowed(n, allow);
        if (r.id < 0) {  // nothing allowed among the candidates: the best allowed token of all
          adjust(logits, vocab);
          r.id = best_allowed();
        }
      }
    }
  }
  r.logprob = std::isfinite(lse) ? logits[r.id] - lse : 0.0f;
  return r;
}

}  // namespace lily
