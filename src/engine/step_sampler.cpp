#include "engine/step_sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace lily {

samp::StepParams StepSampler::make_params(const SamplerParams& p, int vocab, uint64_t seed) {
  samp::StepParams s;
  s.temperature = p.temperature;
  s.greedy = p.temperature <= 0.0f || p.top_k == 1;
  s.inv_temp = p.temperature > 0.0f ? 1.0f / p.temperature : 1.0f;
  s.top_p = p.top_p;
  s.log_min_p = p.min_p > 0.0f ? std::log(p.min_p) : -INFINITY;
  s.top_k = p.top_k > 1 && p.top_k < vocab ? p.top_k : 0;
  s.use_rep = p.repetition_penalty != 1.0f && p.repetition_penalty > 0.0f;
  s.repetition = p.repetition_penalty;
  s.use_pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  s.presence = p.presence_penalty;
  s.frequency = p.frequency_penalty;
  s.seed = seed;
  return s;
}

StepSampler::StepSampler(const SamplerParams& p, const std::vector<int32_t>& prompt, int vocab) : vocab_(vocab) {
  const uint64_t seed =
      p.has_seed ? p.seed : (uint64_t(std::random_device{}()) << 32) ^ uint64_t(std::random_device{}());
  sp_ = make_params(p, vocab, seed);
  table_.assign(size_t(vocab), 0u);
  if (sp_.use_rep)
    for (int32_t id : prompt)
      if (id >= 0 && id < vocab) table_[size_t(id)] |= samp::kPromptBit;
}

void StepSampler::record(int32_t id) {
  if (id >= 0 && id < vocab_) ++table_[size_t(id)];
  ++step_;
}

int32_t StepSampler::pick(const float* logits) const {
  return pick(logits, table_.data(), vocab_, sp_, samp::philox64(sp_.seed, step_));
}

int32_t StepSampler::weights(const float* logits, const uint32_t* table, int V, const samp::StepParams& p,
                             std::vector<uint64_t>& w, uint64_t& z) {
  std::vector<float> a(static_cast<size_t>(V));
  int32_t best = 0;
  for (int i = 0; i < V; ++i) {
    a[size_t(i)] = samp::adjust_logit(logits[i], table[i], p);
    if (a[size_t(i)] > a[size_t(best)]) best = i;
  }
  const float mx = a[size_t(best)];
  z = 0;
  if (p.greedy || !std::isfinite(mx)) return best;
  uint32_t thr = 0;  // key threshold
  if (p.top_k > 0) {
    std::vector<uint32_t> keys(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) keys[size_t(i)] = samp::key_of(a[size_t(i)]);
    std::nth_element(keys.begin(), keys.begin() + (p.top_k - 1), keys.end(), std::greater<uint32_t>());
    thr = keys[size_t(p.top_k - 1)];
  }
  const float thr_m = samp::min_p_threshold(mx, p);
  auto cand = [&](int i) { return samp::key_of(a[size_t(i)]) >= thr && a[size_t(i)] >= thr_m; };
  auto weight = [&](int i) { return samp::weight_of(a[size_t(i)], mx, p.inv_temp); };
  if (p.top_p < 1.0f) {
    std::vector<std::pair<uint32_t, uint64_t>> kw;  // (key, weight) of the candidates
    uint64_t zc = 0;
    for (int i = 0; i < V; ++i)
      if (cand(i)) {
        kw.push_back({samp::key_of(a[size_t(i)]), weight(i)});
        zc += kw.back().second;
      }
    const uint64_t P = samp::top_p_target(p.top_p, zc);
    std::sort(kw.begin(), kw.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
    uint64_t cum = 0;
    for (size_t j = 0; j < kw.size();) {  // whole groups of equal keys
      const uint32_t k = kw[j].first;
      while (j < kw.size() && kw[j].first == k) cum += kw[j++].second;
      if (cum >= P) {
        thr = std::max(thr, k);
        break;
      }
    }
  }
  w.assign(size_t(V), 0);
  for (int i = 0; i < V; ++i)
    if (cand(i)) z += (w[size_t(i)] = weight(i));
  return best;
}

int32_t StepSampler::pick(const float* logits, const uint32_t* table, int V, const samp::StepParams& p, uint64_t r) {
  std::vector<uint64_t> w;
  uint64_t z = 0;
  const int32_t best = weights(logits, table, V, p, w, z);
  if (z == 0) return best;
  const uint64_t target = samp::scale_draw(z, r);
  uint64_t acc = 0;
  for (int i = 0; i < V; ++i) {
    acc += w[size_t(i)];
    if (w[size_t(i)] && acc > target) return i;
  }
  return best;  // not reached: target < z
}

void StepSampler::distribution(const float* logits, std::vector<double>& prob) const {
  std::vector<uint64_t> w;
  uint64_t z = 0;
  const int32_t best = weights(logits, table_.data(), vocab_, sp_, w, z);
  prob.assign(size_t(vocab_), 0.0);
  if (z == 0) {
    prob[size_t(best)] = 1.0;
    return;
  }
  for (int i = 0; i < vocab_; ++i) prob[size_t(i)] = double(w[size_t(i)]) / double(z);
}

}  // namespace lily
