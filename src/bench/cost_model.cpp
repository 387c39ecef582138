#include "bench/cost_model.h"

#include "synth/module_plan.h"

namespace lily {

namespace {
bool is_expert(MatSlot s) { return s == MatSlot::ExpGate || s == MatSlot::ExpUp || s == MatSlot::ExpDown; }
}  // namespace

DecodeBytes decode_bytes_per_token(const ModelWeights& w, int64_t context, int kv_elem_bytes) {
  const auto& c = w.cfg;
  DecodeBytes b;
  for (const auto& m : plan_modules(c)) {
    const QMatrix& q = slot_matrix(w, m, 0);
    uint64_t one = qmatrix_bytes(q);
    if (m.slot == MatSlot::Embed) b.embed_row = q.rows ? one / uint64_t(q.rows) : 0;
    else if (m.slot == MatSlot::LmHead) b.lm_head = one;
    else if (is_expert(m.slot)) b.experts += one * uint64_t(c.top_k);
    else b.dense += one;
  }
  uint64_t n_full = 0, n_lin = 0;
  for (bool f : c.is_full) (f ? n_full : n_lin)++;
  b.kv = n_full * 2 * uint64_t(c.n_kv_heads) * uint64_t(c.head_dim) * uint64_t(context) * uint64_t(kv_elem_bytes);
  uint64_t S = uint64_t(c.lin_v_heads) * uint64_t(c.lin_v_dim) * uint64_t(c.lin_k_dim) * 4;
  uint64_t conv = uint64_t(c.conv_kernel - 1) * uint64_t(c.conv_dim()) * 4;
  b.recurrent = n_lin * 2 * (S + conv);
  return b;
}

uint64_t active_params(const ModelWeights& w) {
  uint64_t p = 0;
  for (const auto& m : plan_modules(w.cfg)) {
    if (m.slot == MatSlot::Embed) continue;
    uint64_t one = uint64_t(m.rows) * uint64_t(m.cols);
    p += is_expert(m.slot) ? one * uint64_t(w.cfg.top_k) : one;
  }
  return p;
}

double prefill_flops(const ModelWeights& w, int64_t tokens) {
  const auto& c = w.cfg;
  double n = double(tokens);
  double f = 2.0 * double(active_params(w)) * n;
  double n_full = 0, n_lin = 0;
  for (bool x : c.is_full) (x ? n_full : n_lin) += 1;
  double visible = n * (n + 1) / 2;  // sum over positions of the keys each one attends to
  f += n_full * 4.0 * c.n_q_heads * c.head_dim * visible;
  f += n_lin * 8.0 * c.lin_v_heads * double(c.lin_k_dim) * c.lin_v_dim * n;
  return f;
}

}  // namespace lily
