#include "cpu/cpu_backend.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cpu/ref_ops.h"

namespace lily {

CpuBackend::CpuBackend(std::shared_ptr<ModelWeights> w, const CpuKernels& k) : w_(std::move(w)), k_(k) {}

std::unique_ptr<SeqState> CpuBackend::new_state(int max_ctx) {
  const ModelConfig& c = w_->cfg;
  auto st = std::make_unique<CpuState>();
  st->max_ctx = max_ctx;
  st->layers.resize(c.n_layers);
  for (int i = 0; i < c.n_layers; ++i) {
    if (c.is_full[i]) continue;
    st->layers[i].conv.assign(static_cast<size_t>(c.conv_kernel - 1) * c.conv_dim(), 0.0f);
    st->layers[i].S.assign(static_cast<size_t>(c.lin_v_heads) * c.lin_v_dim * c.lin_k_dim, 0.0f);
  }
  return st;
}

void CpuBackend::fill_context_for_timing(SeqState& sst, int n) {
  auto* st = dynamic_cast<CpuState*>(&sst);
  if (!st) throw Error("cpu: foreign SeqState");
  if (n < 0 || n > st->max_ctx) throw Error("cpu: context for timing exceeds the state's capacity");
  const ModelConfig& c = w_->cfg;
  const size_t KV = static_cast<size_t>(c.n_kv_heads) * c.head_dim;
  for (int i = 0; i < c.n_layers; ++i) {
    if (!c.is_full[i]) continue;
    auto& l = st->layers[size_t(i)];
    l.k.reserve(static_cast<size_t>(st->max_ctx) * KV);
    l.v.reserve(static_cast<size_t>(st->max_ctx) * KV);
    l.k.assign(static_cast<size_t>(n) * KV, 0.0f);
    l.v.assign(static_cast<size_t>(n) * KV, 0.0f);
  }
  st->pos = n;
}

void CpuBackend::forward(SeqState& sst, const int32_t* ids, int n, int n_logits, float* out,
                         const ForwardOptions& opt) {
  auto* st = dynamic_cast<CpuState*>(&sst);
  if (!st) throw Error("cpu backend: state was made by another backend");
  if (n < 0 || n_logits < 0 || n_logits > n) throw Error("forward: bad token/logit counts");
  if (st->pos + n > st->max_ctx)
    throw Error("context full: " + std::to_string(st->pos) + " + " + std::to_string(n) + " tokens exceed " +
                std::to_string(st->max_ctx));
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= w_->cfg.vocab)
      throw Error("token id " + std::to_string(ids[i]) + " out of range [0, " + std::to_string(w_->cfg.vocab) + ")");
  const int chunk = std::max(1, opt.prefill_chunk);
  const int first_logit = n - n_logits;
  const size_t V = static_cast<size_t>(w_->cfg.vocab);
  for (int s = 0; s < n; s += chunk) {
    if (opt.cancelled && opt.cancelled()) throw Cancelled();
    int m = std::min(chunk, n - s);
    // logits wanted from this chunk: positions in [max(s, first_logit), s + m)
    int lo = std::max(s, first_logit);
    int want = std::max(0, s + m - lo);
    forward_chunk(*st, ids + s, m, want, want ? out + static_cast<size_t>(lo - first_logit) * V : nullptr);
    if (opt.progress) opt.progress(s + m, n);
  }
}

void CpuBackend::forward_chunk(CpuState& st, const int32_t* ids, int n, int n_logits, float* out) {
  const ModelConfig& c = w_->cfg;
  const int H = c.hidden;
  const size_t nH = static_cast<size_t>(n) * H;
  float* x = buf(kX, nH);
  float* h = buf(kH, nH);
  float* a = buf(kA, nH);
  for (int t = 0; t < n; ++t) dequant_row(w_->embed, ids[t], x + static_cast<size_t>(t) * H);
  if (on_hidden) on_hidden(-1, x, n);
  for (int li = 0; li < c.n_layers; ++li) {
    const LayerWeights& L = w_->layers[li];
    for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], L.in_norm.data(), H, c.rms_eps, &h[t * H]);
    {
      PhaseTimer pt(prof_, L.is_full ? Phase::kAttn : Phase::kGdn);
      if (L.is_full)
        attn_layer(L, st.layers[li], h, n, st.pos, st.max_ctx, a);
      else
        gdn_layer(L, st.layers[li], h, n, a);
    }
    for (size_t i = 0; i < nH; ++i) x[i] += a[i];
    for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], L.post_norm.data(), H, c.rms_eps, &h[t * H]);
    {
      PhaseTimer pt(prof_, Phase::kMoe);
      moe_layer(L.moe, h, n, a);
    }
    for (size_t i = 0; i < nH; ++i) x[i] += a[i];
    if (on_hidden) on_hidden(li, x, n);
  }
  st.pos += n;
  for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], w_->final_norm.data(), H, c.rms_eps, &h[t * H]);
  if (on_hidden) on_hidden(c.n_layers, h, n);
  if (n_logits > 0) {
    PhaseTimer pt(prof_, Phase::kLmHead);
    k_.matmul(w_->lm_head, h + static_cast<size_t>(n - n_logits) * H, n_logits, out);
  }
}

namespace {
// x <- x / sqrt(sum(x^2) + eps) * scale, per head of `dim`
void l2norm_heads(float* x, int heads, int dim, float scale) {
  for (int hh = 0; hh < heads; ++hh) {
    float* p = x + hh * dim;
    double ss = 0.0;
    for (int i = 0; i < dim; ++i) ss += static_cast<double>(p[i]) * p[i];
    float inv = static_cast<float>(1.0 / std::sqrt(ss + 1e-6)) * scale;
    for (int i = 0; i < dim; ++i) p[i] *= inv;
  }
}
}  // namespace

void CpuBackend::gdn_layer(const LayerWeights& L, CpuLayerState& s, const float* h, int n, float* out) {
  const ModelConfig& c = w_->cfg;
  const int C = c.conv_dim(), Hk = c.lin_k_heads, Hv = c.lin_v_heads, Dk = c.lin_k_dim, Dv = c.lin_v_dim;
  const int VD = c.value_dim(), KD = c.key_dim();
  float* m = buf(kM, static_cast<size_t>(n) * C);
  float* z = buf(kZ, static_cast<size_t>(n) * VD);
  float* b = buf(kB, static_cast<size_t>(n) * Hv);
  float* a = buf(kAg, static_cast<size_t>(n) * Hv);
  float* y = buf(kY, static_cast<size_t>(n) * VD);
  const fast::MatJob proj[] = {{&L.lin.in_qkv, h, n, m}, {&L.lin.in_z, h, n, z}, {&L.lin.in_b, h, n, b},
                               {&L.lin.in_a, h, n, a}};
  k_.matmul_batch(proj, 4);
  float* conv_out = buf(kConv, C);
  float* o = buf(kO, VD);
  float* g = buf(kG, Hv);
  float* beta = buf(kBeta, Hv);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(Dk));
  for (int t = 0; t < n; ++t) {
    ref::conv_step(s.conv.data(), L.lin.conv.data(), &m[static_cast<size_t>(t) * C], C, c.conv_kernel, conv_out);
    float* q = conv_out;
    float* k = q + KD;
    float* v = k + KD;
    l2norm_heads(q, Hk, Dk, qscale);
    l2norm_heads(k, Hk, Dk, 1.0f);
    for (int j = 0; j < Hv; ++j) {
      beta[j] = ref::sigmoid(b[t * Hv + j]);
      g[j] = L.lin.a_neg[j] * ref::softplus(a[t * Hv + j] + L.lin.dt_bias[j]);
    }
    k_.gdn_step(s.S.data(), q, k, v, g, beta, Hk, Hv, Dk, Dv, o);
    ref::gated_rmsnorm(o, &z[static_cast<size_t>(t) * VD], L.lin.norm.data(), Hv, Dv, c.rms_eps,
                       &y[static_cast<size_t>(t) * VD]);
  }
  k_.matmul(L.lin.out, y, n, out);
}

void CpuBackend::attn_layer(const LayerWeights& L, CpuLayerState& s, const float* h, int n, int pos0, int max_ctx,
                            float* out) {
  const ModelConfig& c = w_->cfg;
  const int nq = c.n_q_heads, nkv = c.n_kv_heads, hd = c.head_dim, KV = c.kv_dim();
  float* qg = buf(kQG, static_cast<size_t>(n) * c.q_proj_rows());
  float* k = buf(kK, static_cast<size_t>(n) * KV);
  float* v = buf(kV, static_cast<size_t>(n) * KV);
  float* o = buf(kO, static_cast<size_t>(n) * nq * hd);
  float* q = buf(kQ, static_cast<size_t>(nq) * hd);
  const fast::MatJob proj[] = {{&L.attn.q, h, n, qg}, {&L.attn.k, h, n, k}, {&L.attn.v, h, n, v}};
  k_.matmul_batch(proj, 3);
  if (s.k.capacity() < static_cast<size_t>(pos0 + n) * KV) {  // once per state: pages are touched as used
    s.k.reserve(static_cast<size_t>(max_ctx) * KV);
    s.v.reserve(static_cast<size_t>(max_ctx) * KV);
  }
  for (int t = 0; t < n; ++t) {
    const int pos = pos0 + t;
    float* kt = &k[static_cast<size_t>(t) * KV];
    for (int hh = 0; hh < nkv; ++hh) {
      ref::rmsnorm(kt + hh * hd, L.attn.k_norm.data(), hd, c.rms_eps, kt + hh * hd);
      ref::rope_neox(kt + hh * hd, c.rope_dim, pos, c.rope_theta);
    }
    s.k.insert(s.k.end(), kt, kt + KV);
    s.v.insert(s.v.end(), &v[static_cast<size_t>(t) * KV], &v[static_cast<size_t>(t) * KV] + KV);
    const float* qgt = &qg[static_cast<size_t>(t) * c.q_proj_rows()];
    for (int hh = 0; hh < nq; ++hh) {  // per head [query hd | gate hd]
      ref::rmsnorm(qgt + hh * 2 * hd, L.attn.q_norm.data(), hd, c.rms_eps, q + hh * hd);
      ref::rope_neox(&q[hh * hd], c.rope_dim, pos, c.rope_theta);
    }
    float* ot = &o[static_cast<size_t>(t) * nq * hd];
    k_.attention_one(q, s.k.data(), s.v.data(), pos + 1, nq, nkv, hd, ot);
    for (int hh = 0; hh < nq; ++hh)
      for (int i = 0; i < hd; ++i) ot[hh * hd + i] *= ref::sigmoid(qgt[hh * 2 * hd + hd + i]);
  }
  k_.matmul(L.attn.o, o, n, out);
}

void CpuBackend::moe_layer(const MoeWeights& mw, const float* h, int n, float* out) {
  const ModelConfig& c = w_->cfg;
  const int H = c.hidden, E = c.n_experts, K = c.top_k, I = c.expert_inter, Is = c.shared_inter;
  const size_t nK = static_cast<size_t>(n) * K;
  float* logits = buf(kLogits, static_cast<size_t>(n) * E);
  float* sg = buf(kSg, n);
  const fast::MatJob router[] = {{&mw.router, h, n, logits}, {&mw.sh_gate_w, h, n, sg}};
  k_.matmul_batch(router, 2);
  // routing: top-k per row, then the (row, weight) pairs grouped per expert (counting sort)
  route_idx_.resize(nK);
  route_w_.resize(nK);
  for (int t = 0; t < n; ++t)
    ref::route_topk(logits + static_cast<size_t>(t) * E, E, K, &route_idx_[t * K], &route_w_[t * K]);
  expert_off_.assign(E + 1, 0);
  for (size_t j = 0; j < nK; ++j) ++expert_off_[route_idx_[j] + 1];
  for (int e = 0; e < E; ++e) expert_off_[e + 1] += expert_off_[e];
  route_perm_.resize(nK);
  fill_.assign(expert_off_.begin(), expert_off_.end() - 1);
  for (size_t j = 0; j < nK; ++j) route_perm_[fill_[route_idx_[j]]++] = static_cast<int>(j);
  // rows gathered per expert; the shared expert's rows (all n) come last: [nK + n] rows in all
  float* xe = buf(kXe, (nK + n) * H);
  float* ye = buf(kYe, (nK + n) * H);
  float* g = buf(kGe, nK * I + static_cast<size_t>(n) * Is);
  float* u = buf(kUe, nK * I + static_cast<size_t>(n) * Is);
  for (size_t j = 0; j < nK; ++j) {
    const int t = route_perm_[j] / K;
    std::copy(h + static_cast<size_t>(t) * H, h + static_cast<size_t>(t + 1) * H, xe + j * H);
  }
  float* gs = g + nK * I;  // shared expert's activations
  float* us = u + nK * I;
  float* ys = ye + nK * H;
  jobs_.clear();
  for (int e = 0; e < E; ++e) {
    const int r0 = expert_off_[e], ne = expert_off_[e + 1] - r0;
    if (!ne) continue;
    jobs_.push_back({&mw.gate.e[e], xe + static_cast<size_t>(r0) * H, ne, g + static_cast<size_t>(r0) * I});
    jobs_.push_back({&mw.up.e[e], xe + static_cast<size_t>(r0) * H, ne, u + static_cast<size_t>(r0) * I});
  }
  jobs_.push_back({&mw.sh_gate, h, n, gs});
  jobs_.push_back({&mw.sh_up, h, n, us});
  k_.matmul_batch(jobs_.data(), static_cast<int>(jobs_.size()));
  const size_t n_act = nK * I + static_cast<size_t>(n) * Is;
  for (size_t i = 0; i < n_act; ++i) g[i] = ref::silu(g[i]) * u[i];
  jobs_.clear();
  for (int e = 0; e < E; ++e) {
    const int r0 = expert_off_[e], ne = expert_off_[e + 1] - r0;
    if (ne) jobs_.push_back({&mw.down.e[e], g + static_cast<size_t>(r0) * I, ne, ye + static_cast<size_t>(r0) * H});
  }
  jobs_.push_back({&mw.sh_down, gs, n, ys});
  k_.matmul_batch(jobs_.data(), static_cast<int>(jobs_.size()));
  for (int t = 0; t < n; ++t) {  // sigmoid-gated shared expert, then the routed experts' weighted sum
    const float gate = ref::sigmoid(sg[t]);
    const float* y = ys + static_cast<size_t>(t) * H;
    float* o = out + static_cast<size_t>(t) * H;
    for (int i = 0; i < H; ++i) o[i] = gate * y[i];
  }
  for (size_t j = 0; j < nK; ++j) {
    const int src = route_perm_[j], t = src / K;
    const float w = route_w_[src];
    float* o = out + static_cast<size_t>(t) * H;
    const float* y = ye + j * H;
    for (int i = 0; i < H; ++i) o[i] += w * y[i];
  }
}

float* CpuBackend::buf(Slot s, size_t n) {
  std::vector<float>& v = bufs_[s];
  if (v.size() < n) v.resize(n);  // grows to the largest chunk once, then never again
  return v.data();
}

}  // namespace lily
