// The CPU backend's speculative-decoding pieces: the multi-token-prediction (MTP) block's forward with its own KV
// cache, and verify / accept (the DeltaNet states after each verified token kept as rewind points, KV truncation).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cpu/cpu_backend.h"
#include "cpu/ref_ops.h"

namespace lily {

void CpuState::assign(const SeqState& other) {
  const auto* o = dynamic_cast<const CpuState*>(&other);
  if (!o) throw Error("cpu: cannot assign a state made by another backend");
  *this = *o;
}

std::string CpuBackend::mtp_unavailable_reason() const {
  if (w_->mtp_tensors.empty())
    return "the checkpoint has no multi-token-prediction weights (mtp.*); --mtp-from DIR reads them from another "
           "checkpoint of the model";
  return "the multi-token-prediction weights were not loaded (--mtp off)";
}

namespace {
CpuState& cpu_state(SeqState& s) {
  auto* st = dynamic_cast<CpuState*>(&s);
  if (!st) throw Error("cpu backend: state was made by another backend");
  return *st;
}
}  // namespace

int CpuBackend::mtp_rows(const SeqState& s) const {
  const auto* st = dynamic_cast<const CpuState*>(&s);
  if (!st) throw Error("cpu backend: state was made by another backend");
  return static_cast<int>(st->mtp.k.size() / static_cast<size_t>(w_->cfg.kv_dim()));
}

void CpuBackend::mtp_truncate(SeqState& s, int rows) {
  CpuState& st = cpu_state(s);
  if (rows < 0 || rows > mtp_rows(st))
    throw Error("mtp_truncate: " + std::to_string(rows) + " rows asked, the cache holds " + std::to_string(mtp_rows(st)));
  const size_t KV = static_cast<size_t>(w_->cfg.kv_dim());
  st.mtp.k.resize(static_cast<size_t>(rows) * KV);
  st.mtp.v.resize(static_cast<size_t>(rows) * KV);
}

void CpuBackend::mtp_forward(SeqState& s, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                             float* logits, float* hidden_out) {
  if (!w_->mtp) throw Error(mtp_unavailable_reason());
  CpuState& st = cpu_state(s);
  const ModelConfig& c = w_->cfg;
  if (n < 1 || n_logits < 0 || n_logits > n) throw Error("mtp_forward: bad row/logit counts");
  if (pos0 < 0 || pos0 + n > st.max_ctx || mtp_rows(st) + n > st.max_ctx)
    throw Error("mtp_forward: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + n - 1) +
                " do not fit the state's " + std::to_string(st.max_ctx));
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw Error("token id " + std::to_string(ids[i]) + " out of range [0, " + std::to_string(c.vocab) + ")");
  const MtpWeights& m = *w_->mtp;
  const int H = c.hidden;
  const size_t nH = static_cast<size_t>(n) * H;
  float* in = buf(kMtpIn, 2 * nH);  // [n][embedding half | hidden half]
  float* x = buf(kX, nH);
  float* h = buf(kH, nH);
  float* a = buf(kA, nH);
  for (int t = 0; t < n; ++t) {
    float* row = in + static_cast<size_t>(t) * 2 * H;
    dequant_row(w_->embed, ids[t], x);
    ref::rmsnorm(x, m.pre_norm_e.data(), H, c.rms_eps, row);
    ref::rmsnorm(hidden + static_cast<size_t>(t) * H, m.pre_norm_h.data(), H, c.rms_eps, row + H);
  }
  k_.matmul(m.fc, in, n, x);
  run_layer(m.layer, st.mtp, x, h, a, n, pos0, st.max_ctx);
  for (int t = 0; t < n; ++t) ref::rmsnorm(&x[t * H], m.norm.data(), H, c.rms_eps, &h[t * H]);
  if (hidden_out) std::memcpy(hidden_out, h, nH * sizeof(float));
  if (n_logits > 0) k_.matmul(w_->lm_head, h + static_cast<size_t>(n - n_logits) * H, n_logits, logits);
}

namespace {
struct CpuUndo final : VerifyUndo {
  const CpuState* st = nullptr;  // the verified state
  int pos = 0, n = 0;
  uint64_t ticket = 0;  // CpuBackend::snap_ticket_ of this verify (its rewind points)
};
}  // namespace

std::unique_ptr<VerifyUndo> CpuBackend::verify(SeqState& s, const int32_t* ids, int n, float* logits, float* hidden) {
  CpuState& st = cpu_state(s);
  if (n < 1) throw Error("verify: expected at least one token, got " + std::to_string(n));
  auto u = std::make_unique<CpuUndo>();
  u->st = &st;
  u->pos = st.pos;
  u->n = n;
  u->ticket = ++snap_ticket_;
  // room for the rewind points: the state after each token but the last (with one token: none, nothing to rewind)
  snaps_.resize(st.layers.size());
  for (size_t i = 0; i < st.layers.size(); ++i) {
    const size_t rows = static_cast<size_t>(n - 1);
    GdnSnaps& sn = snaps_[i];
    if (sn.S.size() < rows * st.layers[i].S.size()) sn.S.resize(rows * st.layers[i].S.size());
    if (sn.conv.size() < rows * st.layers[i].conv.size()) sn.conv.resize(rows * st.layers[i].conv.size());
  }
  struct Keep {  // the rewind points are kept by this forward only, however it ends
    CpuBackend& b;
    ~Keep() { b.snap_rows_ = 0; }
  } keep{*this};
  snap_rows_ = n - 1;
  snap_pos0_ = st.pos;
  const int H = w_->cfg.hidden;
  ForwardOptions fo;
  if (hidden)
    fo.on_hidden = [&](const float* h, int row0, int rows) {
      std::memcpy(hidden + static_cast<size_t>(row0 - u->pos) * H, h, static_cast<size_t>(rows) * H * sizeof(float));
    };
  forward(st, ids, n, n, logits, fo);
  return u;
}

void CpuBackend::accept(SeqState& s, VerifyUndo& undo, int m) {
  CpuState& st = cpu_state(s);
  auto* u = dynamic_cast<CpuUndo*>(&undo);
  if (!u) throw Error("accept: the undo record was made by another backend");
  if (u->st != &st) throw Error("accept: the undo record belongs to another state");
  if (m < 1 || m > u->n) throw Error("accept: " + std::to_string(m) + " tokens kept of " + std::to_string(u->n));
  if (st.pos != u->pos + u->n) throw Error("accept: the state moved since its verify");
  if (m == u->n) return;
  if (u->ticket != snap_ticket_) throw Error("accept: another verify ran since this one (its rewind points are gone)");
  const size_t KV = static_cast<size_t>(w_->cfg.kv_dim());
  for (size_t i = 0; i < st.layers.size(); ++i) {
    CpuLayerState& l = st.layers[i];
    if (w_->cfg.is_full[i]) {  // the rows of the kept tokens are final
      l.k.resize(static_cast<size_t>(u->pos + m) * KV);
      l.v.resize(static_cast<size_t>(u->pos + m) * KV);
    } else {  // the states after m tokens
      const GdnSnaps& sn = snaps_[i];
      const size_t at = static_cast<size_t>(m - 1);
      std::copy_n(sn.S.begin() + static_cast<std::ptrdiff_t>(at * l.S.size()), l.S.size(), l.S.begin());
      std::copy_n(sn.conv.begin() + static_cast<std::ptrdiff_t>(at * l.conv.size()), l.conv.size(), l.conv.begin());
    }
  }
  st.pos = u->pos + m;
}

}  // namespace lily
