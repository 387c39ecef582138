#include "cpu/ref_ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lily::ref {

void matvec(const QMatrix& W, const float* x, float* y) { matmul(W, x, 1, y); }

void matmul(const QMatrix& W, const float* X, int n, float* Y) {
  std::vector<float> row(static_cast<size_t>(W.cols));
  for (int64_t r = 0; r < W.rows; ++r) {
    dequant_row(W, r, row.data());
    for (int i = 0; i < n; ++i) {
      const float* x = X + static_cast<size_t>(i) * W.cols;
      double acc = 0.0;  // the reference accumulates in double: it is the oracle, not the fast path
      for (int64_t c = 0; c < W.cols; ++c) acc += static_cast<double>(row[c]) * x[c];
      Y[static_cast<size_t>(i) * W.rows + r] = static_cast<float>(acc);
    }
  }
}

void rmsnorm(const float* x, const float* w, int n, float eps, float* y) {
  double ss = 0.0;
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float inv = static_cast<float>(1.0 / std::sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void rope_neox(float* x, int rope_dim, int pos, double theta) {
  int half = rope_dim / 2;
  for (int j = 0; j < half; ++j) {
    // inv_freq computed in f32 like the reference (theta^(-2j/rope_dim)), angle = pos * inv_freq
    float inv_freq = static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * j) / rope_dim));
    float ang = static_cast<float>(pos) * inv_freq;
    float c = std::cos(ang), s = std::sin(ang);
    float a = x[j], b = x[j + half];
    x[j] = a * c - b * s;
    x[j + half] = b * c + a * s;
  }
}

float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void route_topk(const float* logits, int n_experts, int k, int* idx, float* weight) {
  float mx = *std::max_element(logits, logits + n_experts);
  thread_local std::vector<float> p;
  thread_local std::vector<int> order;
  p.resize(n_experts);
  order.resize(n_experts);
  double sum = 0.0;
  for (int e = 0; e < n_experts; ++e) sum += (p[e] = std::exp(logits[e] - mx));
  for (int e = 0; e < n_experts; ++e) p[e] = static_cast<float>(p[e] / sum);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int a, int b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  float tot = 0.0f;
  for (int i = 0; i < k; ++i) tot += p[order[i]];
  for (int i = 0; i < k; ++i) {
    idx[i] = order[i];
    weight[i] = p[order[i]] / tot;
  }
}

void conv_step(float* state, const float* w, const float* x, int C, int K, float* out) {
  for (int c = 0; c < C; ++c) {
    float acc = w[c * K + (K - 1)] * x[c];
    for (int t = 0; t < K - 1; ++t) acc += w[c * K + t] * state[t * C + c];
    out[c] = silu(acc);
  }
  for (int t = 0; t + 1 < K - 1; ++t)
    std::copy(state + (t + 1) * C, state + (t + 2) * C, state + t * C);
  if (K > 1) std::copy(x, x + C, state + (K - 2) * C);
}

void gdn_step(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
              int Hk, int Hv, int Dk, int Dv, float* o) {
  int rep = Hv / Hk;
  for (int j = 0; j < Hv; ++j) {
    const float* kj = k + (j / rep) * Dk;
    const float* qj = q + (j / rep) * Dk;
    const float* vj = v + j * Dv;
    float* Sj = S + static_cast<size_t>(j) * Dv * Dk;
    float alpha = std::exp(g[j]);
    for (int r = 0; r < Dv; ++r) {
      float* row = Sj + static_cast<size_t>(r) * Dk;  // S[:, r]
      float u = 0.0f;
      for (int i = 0; i < Dk; ++i) u += (row[i] *= alpha) * kj[i];
      float delta = beta[j] * (vj[r] - u);
      float out = 0.0f;
      for (int i = 0; i < Dk; ++i) out += (row[i] += kj[i] * delta) * qj[i];
      o[j * Dv + r] = out;
    }
  }
}

void gdn_scan(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g, const float* beta,
              int n, int Hk, int Hv, int Dk, int Dv, float* o, float* snaps, int n_snaps) {
  const size_t ss = static_cast<size_t>(Hv) * Dv * Dk;
  for (int t = 0; t < n; ++t) {
    gdn_step(S, q + t * xs, k + t * xs, v + t * xs, g + static_cast<size_t>(t) * Hv, beta + static_cast<size_t>(t) * Hv,
             Hk, Hv, Dk, Dv, o + static_cast<size_t>(t) * Hv * Dv);
    if (snaps && t < n_snaps) std::copy(S, S + ss, snaps + static_cast<size_t>(t) * ss);
  }
}

void gated_rmsnorm(const float* o, const float* z, const float* w, int Hv, int Dv, float eps, float* y) {
  for (int j = 0; j < Hv; ++j) {
    rmsnorm(o + j * Dv, w, Dv, eps, y + j * Dv);
    for (int i = 0; i < Dv; ++i) y[j * Dv + i] *= silu(z[j * Dv + i]);
  }
}

void attention_one(const float* q, const float* kcache, const float* vcache, int T, int nq, int nkv, int hd,
                   float* out) {
  int group = nq / nkv;
  float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> s(T);
  for (int h = 0; h < nq; ++h) {
    int kvh = h / group;
    const float* qh = q + h * hd;
    float mx = -INFINITY;
    for (int t = 0; t < T; ++t) {
      const float* kt = kcache + (static_cast<size_t>(t) * nkv + kvh) * hd;
      float d = 0.0f;
      for (int i = 0; i < hd; ++i) d += qh[i] * kt[i];
      s[t] = d * scale;
      mx = std::max(mx, s[t]);
    }
    double sum = 0.0;
    for (int t = 0; t < T; ++t) sum += (s[t] = std::exp(s[t] - mx));
    float* oh = out + h * hd;
    std::fill(oh, oh + hd, 0.0f);
    for (int t = 0; t < T; ++t) {
      float p = static_cast<float>(s[t] / sum);
      const float* vt = vcache + (static_cast<size_t>(t) * nkv + kvh) * hd;
      for (int i = 0; i < hd; ++i) oh[i] += p * vt[i];
    }
  }
}

}  // namespace lily::ref
