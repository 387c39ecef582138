#include "cpu/cpu_backend.h"

#include "core/dtype.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cpu/fast/cpu_isa.h"
#include "cpu/ref_ops.h"
#include "cpu/thread_pool.h"

namespace lily {

// The SIMD tier is resolved here, on the constructing thread, so that a bad LILY_CPU_ISA is an error at start
// rather than inside a pool task.
CpuBackend::CpuBackend(std::shared_ptr<ModelWeights> w, const CpuKernels& k) : w_(std::move(w)), k_(k) {
  if (&k_ != &cpu_reference_kernels()) fast::active_isa();
}

std::string CpuBackend::name() const {
  std::string s = std::string("cpu-") + k_.name;
  if (&k_ != &cpu_reference_kernels()) s += std::string("-") + fast::isa_name(fast::active_isa());
  return s;
}

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
  const int chunk = prefill_chunk_or_default(opt.prefill_chunk);
  const int first_logit = n - n_logits;
  const size_t V = static_cast<size_t>(w_->cfg.vocab);
  for (int s = 0; s < n; s += chunk) {
    if (opt.cancelled && opt.cancelled()) throw Cancelled();
    int m = std::min(chunk, n - s);
    // logits wanted from this chunk: positions in [max(s, first_logit), s + m)
    int lo = std::max(s, first_logit);
    int want = std::max(0, s + m - lo);
    forward_chunk(*st, ids + s, m, want, want ? out + static_cast<size_t>(lo - first_logit) * V : nullptr, opt);
    if (opt.progress) opt.progress(s + m, n);
  }
}

void CpuBackend::forward_chunk(CpuState& st, const int32_t* ids, int n, int n_logits, float* out,
                               const ForwardOptions& opt) {
  const ModelConfig& c = w_->cfg;
  const int H = c.hidden;
  const size_t nH = static_cast<size_t>(n) * H;
  float* x = buf(kX, nH);
  float* h = buf(kH, nH);
  float* a = buf(kA, nH);
  for (int t = 0; t < n; ++t) dequant_row(w_->embed, ids[t], x + static_cast<size_t>(t) * H);
  if (on_hidden) on_hidden(-1, x, n);
  for (int li = 0; li < c.n_layers; ++li) {
    run_layer(w_->layers[li], st.layers[li], x, h, a, n, st.pos, st.max_ctx,
              snap_rows_ > 0 ? &snaps_[size_t(li)] : nullptr);
    if (on_hidden) on_hidden(li, x, n);
  }
  st.pos += n;
  for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], w_->final_norm.data(), H, c.rms_eps, &h[t * H]);
  if (on_hidden) on_hidden(c.n_layers, h, n);
  if (n_logits > 0) {
    PhaseTimer pt(prof_, Phase::kLmHead);
    k_.matmul(w_->lm_head, h + static_cast<size_t>(n - n_logits) * H, n_logits, out);
  }
  if (opt.on_hidden) opt.on_hidden(h, st.pos - n, n);  // last: the hook may run the MTP block (same scratch)
}

void CpuBackend::run_layer(const LayerWeights& L, CpuLayerState& s, float* x, float* h, float* a, int n, int pos0,
                           int max_ctx, GdnSnaps* snap) {
  const ModelConfig& c = w_->cfg;
  const int H = c.hidden;
  const size_t nH = static_cast<size_t>(n) * H;
  {
    PhaseTimer pt(prof_, Phase::kNorms);
    for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], L.in_norm.data(), H, c.rms_eps, &h[t * H]);
  }
  if (L.is_full)
    attn_layer(L, s, h, n, pos0, max_ctx, a);
  else
    gdn_layer(L, s, h, n, pos0, snap, a);
  {
    PhaseTimer pt(prof_, Phase::kNorms);
    for (size_t i = 0; i < nH; ++i) x[i] += a[i];
    for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], L.post_norm.data(), H, c.rms_eps, &h[t * H]);
  }
  moe_layer(L.moe, h, n, a);
  {
    PhaseTimer pt(prof_, Phase::kNorms);
    for (size_t i = 0; i < nH; ++i) x[i] += a[i];
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
// ref::conv_step's output for token t of a chunk whose raw inputs are x [n][C], without touching the state:
// tap j < K-1 reads the input at position t-(K-1)+j, from x when it is in the chunk, else from state [K-1][C]
// (the K-1 inputs before the chunk, oldest first).
void conv_token(const float* state, const float* w, const float* x, int t, int C, int K, float* out) {
  const float* in[64];  // K <= 64 (config check)
  for (int j = 0; j < K - 1; ++j) {
    const int pos = t - (K - 1) + j;
    in[j] = pos >= 0 ? x + static_cast<size_t>(pos) * C : state + static_cast<size_t>(pos + K - 1) * C;
  }
  const float* xt = x + static_cast<size_t>(t) * C;
  for (int ch = 0; ch < C; ++ch) {
    float acc = w[ch * K + (K - 1)] * xt[ch];
    for (int j = 0; j < K - 1; ++j) acc += w[ch * K + j] * in[j][ch];
    out[ch] = ref::silu(acc);
  }
}

// The state after the chunk: its last K-1 raw inputs (from before the chunk too when n < K-1).
void conv_state_advance(float* state, const float* x, int n, int C, int K) {
  for (int r = 0; r < K - 1; ++r) {  // row r = input at chunk position n-(K-1)+r; rows only move down
    const int pos = n - (K - 1) + r;
    const float* src = pos >= 0 ? x + static_cast<size_t>(pos) * C : state + static_cast<size_t>(pos + K - 1) * C;
    std::copy(src, src + C, state + static_cast<size_t>(r) * C);
  }
}

}  // namespace

void CpuBackend::gdn_layer(const LayerWeights& L, CpuLayerState& s, const float* h, int n, int pos0, GdnSnaps* snap,
                           float* out) {
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
  {
    PhaseTimer pt(prof_, Phase::kGdnProj);
    k_.matmul_batch(proj, 4);
  }
  PhaseTimer scan(prof_, Phase::kGdnScan);
  // conv + norms + gates for every token of the chunk, then the recurrence over the chunk in one call
  float* conv_out = buf(kConv, static_cast<size_t>(n) * C);  // [n][q KD | k KD | v VD]
  float* o = buf(kO, static_cast<size_t>(n) * VD);
  float* g = buf(kG, static_cast<size_t>(n) * Hv);
  float* beta = buf(kBeta, static_cast<size_t>(n) * Hv);
  const float qscale = 1.0f / std::sqrt(static_cast<float>(Dk));
  // Tokens are independent here once each sees its K-1 previous raw inputs (rows of m, or the conv state before
  // the chunk), so they are spread over the pool; the arithmetic is ref::conv_step's, in its order.
  const int K = c.conv_kernel;
  const float* st = s.conv.data();
  ThreadPool& pool = ThreadPool::global();
  constexpr int kTok = 4;  // tokens per task
  pool.parallel_for((n + kTok - 1) / kTok, [&](int task, int) {
    for (int t = task * kTok; t < std::min(n, (task + 1) * kTok); ++t) {
      float* q = conv_out + static_cast<size_t>(t) * C;
      conv_token(st, L.lin.conv.data(), m, t, C, K, q);
      l2norm_heads(q, Hk, Dk, qscale);
      l2norm_heads(q + KD, Hk, Dk, 1.0f);
      for (int j = 0; j < Hv; ++j) {
        beta[t * Hv + j] = ref::sigmoid(b[t * Hv + j]);
        g[t * Hv + j] = L.lin.a_neg[j] * ref::softplus(a[t * Hv + j] + L.lin.dt_bias[j]);
      }
    }
  });
  // a verify's rewind points that fall in this chunk: the states after its tokens t0 .. t0 + n_snap - 1
  const int t0 = pos0 - snap_pos0_, n_snap = snap ? std::clamp(snap_rows_ - t0, 0, n) : 0;
  const size_t cs = s.conv.size(), ss = s.S.size();
  for (int t = 0; t < n_snap; ++t) {
    float* dst = snap->conv.data() + static_cast<size_t>(t0 + t) * cs;
    std::copy(s.conv.begin(), s.conv.end(), dst);
    conv_state_advance(dst, m, t + 1, C, K);
  }
  conv_state_advance(s.conv.data(), m, n, C, K);
  k_.gdn_scan(s.S.data(), conv_out, conv_out + KD, conv_out + 2 * KD, C, g, beta, n, Hk, Hv, Dk, Dv, o,
              n_snap ? snap->S.data() + static_cast<size_t>(t0) * ss : nullptr, n_snap);
  pool.parallel_for((n + kTok - 1) / kTok, [&](int task, int) {
    for (int t = task * kTok; t < std::min(n, (task + 1) * kTok); ++t)
      ref::gated_rmsnorm(o + static_cast<size_t>(t) * VD, &z[static_cast<size_t>(t) * VD], L.lin.norm.data(), Hv,
                         Dv, c.rms_eps, &y[static_cast<size_t>(t) * VD]);
  });
  scan.stop();
  PhaseTimer pt(prof_, Phase::kGdnProj);
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
  {
    PhaseTimer pt(prof_, Phase::kAttnProj);
    k_.matmul_batch(proj, 3);
  }
  PhaseTimer core(prof_, Phase::kAttnCore);
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
    float* vt = &v[static_cast<size_t>(t) * KV];
    if (kv_f16) {
      auto r = [](float x) { return f16_to_f32(f32_to_f16(std::clamp(x, -65504.f, 65504.f))); };
      for (int i = 0; i < KV; ++i) {
        kt[i] = r(kt[i]);
        vt[i] = r(vt[i]);
      }
    }
    s.k.insert(s.k.end(), kt, kt + KV);
    s.v.insert(s.v.end(), vt, vt + KV);
    const float* qgt = &qg[static_cast<size_t>(t) * c.q_proj_rows()];
    for (int hh = 0; hh < nq; ++hh) {  // per head [query hd | gate hd]
      ref::rmsnorm(qgt + hh * 2 * hd, L.attn.q_norm.data(), hd, c.rms_eps, q + hh * hd);
      ref::rope_neox(&q[hh * hd], c.rope_dim, pos, c.rope_theta);
    }
    float* ot = &o[static_cast<size_t>(t) * nq * hd];
    // every cached row (the main model's: pos + 1 of them; the MTP layer's cache may skip positions)
    k_.attention_one(q, s.k.data(), s.v.data(), static_cast<int>(s.k.size() / KV), nq, nkv, hd, ot);
    for (int hh = 0; hh < nq; ++hh)
      for (int i = 0; i < hd; ++i) ot[hh * hd + i] *= ref::sigmoid(qgt[hh * 2 * hd + hd + i]);
  }
  core.stop();
  PhaseTimer pt(prof_, Phase::kAttnProj);
  k_.matmul(L.attn.o, o, n, out);
}

void CpuBackend::moe_layer(const MoeWeights& mw, const float* h, int n, float* out) {
  const ModelConfig& c = w_->cfg;
  const int H = c.hidden, E = c.n_experts, K = c.top_k, I = c.expert_inter, Is = c.shared_inter;
  const size_t nK = static_cast<size_t>(n) * K;
  float* logits = buf(kLogits, static_cast<size_t>(n) * E);
  float* sg = buf(kSg, n);
  const fast::MatJob router[] = {{&mw.router, h, n, logits}, {&mw.sh_gate_w, h, n, sg}};
  PhaseTimer ptr(prof_, Phase::kMoeRouter);
  k_.matmul_batch(router, 2);
  ptr.stop();
  PhaseTimer pto(prof_, Phase::kMoeOther);
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
  ThreadPool::global().parallel_for(static_cast<int>((nK + 31) / 32), [&](int task, int) {
    for (size_t j = task * size_t{32}; j < std::min(nK, (task + 1) * size_t{32}); ++j) {
      const int t = route_perm_[j] / K;
      std::copy(h + static_cast<size_t>(t) * H, h + static_cast<size_t>(t + 1) * H, xe + j * H);
    }
  });
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
  pto.stop();
  PhaseTimer pte(prof_, Phase::kMoeExperts);
  k_.matmul_batch(jobs_.data(), static_cast<int>(jobs_.size()));
  pte.stop();
  pto.start();
  const size_t n_act = nK * I + static_cast<size_t>(n) * Is;
  ThreadPool& pool = ThreadPool::global();
  constexpr size_t kActChunk = 16384;
  pool.parallel_for(static_cast<int>((n_act + kActChunk - 1) / kActChunk), [&](int task, int) {
    const size_t i1 = std::min(n_act, (task + 1) * kActChunk);
    for (size_t i = task * kActChunk; i < i1; ++i) g[i] = ref::silu(g[i]) * u[i];
  });
  jobs_.clear();
  for (int e = 0; e < E; ++e) {
    const int r0 = expert_off_[e], ne = expert_off_[e + 1] - r0;
    if (ne) jobs_.push_back({&mw.down.e[e], g + static_cast<size_t>(r0) * I, ne, ye + static_cast<size_t>(r0) * H});
  }
  jobs_.push_back({&mw.sh_down, gs, n, ys});
  pto.stop();
  pte.start();
  k_.matmul_batch(jobs_.data(), static_cast<int>(jobs_.size()));
  pte.stop();
  pto.start();
  // sigmoid-gated shared expert, then the routed experts' weighted sum, per token (in parallel); each token adds
  // its experts' rows in gathered order (as a serial loop over the gathered rows would)
  route_pos_.resize(nK);
  for (size_t j = 0; j < nK; ++j) route_pos_[route_perm_[j]] = static_cast<int>(j);
  constexpr int kTok = 4;
  pool.parallel_for((n + kTok - 1) / kTok, [&](int task, int) {
    thread_local std::vector<int> tpos;
    tpos.resize(K);
    int* pos = tpos.data();
    for (int t = task * kTok; t < std::min(n, (task + 1) * kTok); ++t) {
      const float gate = ref::sigmoid(sg[t]);
      const float* y = ys + static_cast<size_t>(t) * H;
      float* o = out + static_cast<size_t>(t) * H;
      for (int i = 0; i < H; ++i) o[i] = gate * y[i];
      std::copy(&route_pos_[static_cast<size_t>(t) * K], &route_pos_[static_cast<size_t>(t) * K] + K, pos);
      std::sort(pos, pos + K);
      for (int k = 0; k < K; ++k) {
        const float w = route_w_[route_perm_[pos[k]]];
        const float* yr = ye + static_cast<size_t>(pos[k]) * H;
        for (int i = 0; i < H; ++i) o[i] += w * yr[i];
      }
    }
  });
}

float* CpuBackend::buf(Slot s, size_t n) {
  std::vector<float>& v = bufs_[s];
  if (v.size() < n) v.resize(n);  // grows to the largest chunk once, then never again
  return v.data();
}

}  // namespace lily
