// PrefillRunner: the layer loop of the batched prefill (see prefill_runner.h), mirroring CpuBackend::forward_chunk:
// embed; per layer RMSNorm -> GEMM operand rows, token mixer (GDN or attention) with the out projection added into
// the residual, RMSNorm -> operand rows, MoE (router GEMM, device routing, grouped expert GEMMs, shared expert,
// combine); final RMSNorm + lm_head on the rows whose logits are wanted. Operand rows are bf16 or fp16 (+ low
// part, + row scale) by prec_; in the fp16 modes the mixers and SiLU*mul write f32 to stage_ and to_act converts.
#include "cuda/prefill/prefill_runner.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "cuda/common/cuda_check.h"

namespace lily::cuda {

// Grouped GEMM tile rows for a chunk of n tokens: 128-row tiles once the experts average >= 96 rows (one
// dequantisation of an expert's W per 128 rows; fewer rows waste half a 128-row tile's MMAs), else 64.
int PrefillRunner::tile_rows(int n) const {
  const ModelConfig& c = *m_.cfg;
  return int64_t(n) * c.top_k >= int64_t(96) * c.n_experts ? kGemmTileMBig : kGemmTileM;
}

PrefillRunner::PrefillRunner(const PrefillModel& m, int max_chunk, const std::function<void*(size_t)>& alloc,
                             bool simple, int prec, bool profile)
    : m_(m), max_chunk_(max_chunk), simple_(simple), prec_(prec), mode_(prec), timer_(profile) {
  if (prec != kPrecBF16 && prec != kPrecFP16 && prec != kPrecSplit && prec != kPrecMixed)
    throw Error("prefill: bad precision");
  // mixed: operand rows as split; the roles of kMixedSplitRoles multiply both parts, the others the high part
  if (prec == kPrecMixed) prec_ = kPrecSplit;
  split_roles_ = prec == kPrecMixed ? kMixedSplitRoles : ~0u;
  const ModelConfig& c = *m.cfg;
  const size_t N = size_t(max_chunk), H = size_t(c.hidden), nk = N * size_t(c.top_k);
  const size_t cd = size_t(c.conv_dim()), vd = size_t(c.value_dim()), qd = size_t(c.n_q_heads) * c.head_dim;
  P_ = int(std::max<size_t>(cd + vd + 2 * size_t(c.lin_v_heads), size_t(c.q_proj_rows()) + 2 * size_t(c.kv_dim())));
  max_tiles_ = int((nk + kGemmTileM - 1) / kGemmTileM) + c.n_experts;
  auto f32 = [&](size_t n) { return static_cast<float*>(alloc(std::max<size_t>(n, 4) * 4)); };
  auto b16 = [&](size_t n) { return static_cast<uint16_t*>(alloc(std::max<size_t>(n, 8) * 2)); };
  auto i32 = [&](size_t n) { return static_cast<int32_t*>(alloc(std::max<size_t>(n, 4) * 4)); };
  ids_ = i32(N);
  x_ = f32(N * H);
  proj_ = f32(N * size_t(P_));
  cbuf_ = f32(N * cd);
  obuf_ = f32(N * vd);
  gdn_tc_ = prec_ != kPrecSplit && prefill_gdn_tc_device_ok(c.lin_k_dim, c.lin_v_dim);
  if (gdn_tc_) gdn_ws_ = f32(prefill_gdn_ws_floats(int(N), c.lin_v_heads, c.lin_k_dim, c.lin_v_dim));
  rl_ = f32(N * size_t(c.n_experts));
  sg_ = f32(N);
  rw_ = f32(nk);
  yd_ = f32(nk * H);
  shd_ = f32(N * H);
  logits_ = f32(size_t(kLogitRows) * c.vocab);
  auto act = [&](size_t rows, size_t K) {
    ActRows a;
    a.hi = b16(rows * K);
    if (prec_ != kPrecBF16) a.scale = f32(rows);
    if (prec_ == kPrecSplit) a.lo = b16(rows * K);
    return a;
  };
  xa_ = act(N, H);
  ya_ = act(N, std::max(vd, qd));
  acta_ = act(nk, size_t(c.expert_inter));
  sacta_ = act(N, size_t(c.shared_inter));
  if (prec_ != kPrecBF16)
    stage_ = f32(std::max({N * std::max(vd, qd), nk * size_t(c.expert_inter), N * size_t(c.shared_inter)}));
  qb_ = b16(N * qd);
  // the precise attention (P in two fp16 parts) where |q|, |k| <= sqrt(hd) * max|norm weight| (RMSNorm bound, RoPE
  // keeps it) fits fp16
  attn_precise_.assign(m.layers->size(), 0);
  if (prec_ != kPrecBF16) {
    std::vector<float> wq(size_t(c.head_dim)), wk(size_t(c.head_dim));
    for (size_t i = 0; i < m.layers->size(); ++i) {
      const DLayer& d = (*m.layers)[i];
      if (!d.is_full || !d.q_norm || !d.k_norm) continue;
      LILY_CUDA_CHECK(cudaMemcpy(wq.data(), d.q_norm, wq.size() * 4, cudaMemcpyDeviceToHost));
      LILY_CUDA_CHECK(cudaMemcpy(wk.data(), d.k_norm, wk.size() * 4, cudaMemcpyDeviceToHost));
      double mx = 0;
      for (size_t j = 0; j < wq.size(); ++j) mx = std::max({mx, std::fabs(double(wq[j])), std::fabs(double(wk[j]))});
      attn_precise_[i] = std::sqrt(double(c.head_dim)) * mx * 1.01 < 60000.0 ? 1 : 0;
    }
  }
  ridx_ = i32(nk);
  counts_ = i32(size_t(c.n_experts));
  fill_ = i32(size_t(c.n_experts));
  tiles_ = i32(size_t(max_tiles_) * 3);
  ntiles_ = i32(1);
  row_token_ = i32(nk);
  slot_row_ = i32(nk);
}

void PrefillRunner::set_a(GemmArgs& g, const ActRows& A, int role) const {
  g.A = A.hi;
  g.A_lo = A.lo;
  g.a_scale = A.scale;
  g.prec = prec_;
  g.rows_first = rows_first_;
  if (prec_ == kPrecSplit && !(split_roles_ >> role & 1u)) {
    g.prec = kPrecFP16;
    g.A_lo = nullptr;
  }
}

void PrefillRunner::to_act(int n, int K, const ActRows& dst, cudaStream_t s) {
  if (prec_ != kPrecBF16) prefill_quant_rows(stage_, K, n, K, prec_, dst, s);
}

void PrefillRunner::gemm(const ActRows& A, int lda, int M, const DMat& W, float* C, int ldc, int mode, int role,
                         cudaStream_t s) {
  GemmArgs g;
  set_a(g, A, role);
  g.lda = lda;
  g.M = M;
  g.W0 = W;
  g.C = C;
  g.ldc = ldc;
  prefill_gemm(g, mode, s, simple_);
}

void PrefillRunner::gdn_layer(const DLayer& d, const PrefillState& st, int n, int pos0, cudaStream_t s) {
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden, cd = c.conv_dim(), vd = c.value_dim(), hv = c.lin_v_heads;
  timer_.mark("gdn.proj", s);
  gemm(xa_, H, n, d.qkv, proj_, P_, kGemmStore, kRoleGdnProj, s);
  gemm(xa_, H, n, d.z, proj_ + cd, P_, kGemmStore, kRoleGdnProj, s);
  gemm(xa_, H, n, d.b, proj_ + cd + vd, P_, kGemmStore, kRoleGdnBA, s);
  gemm(xa_, H, n, d.a, proj_ + cd + vd + hv, P_, kGemmStore, kRoleGdnBA, s);
  timer_.mark("gdn.scan", s);
  GdnChunkArgs g;
  g.proj = proj_;
  g.ldp = P_;
  g.n = n;
  g.pos0 = pos0;
  g.Hk = c.lin_k_heads;
  g.Hv = hv;
  g.Dk = c.lin_k_dim;
  g.Dv = c.lin_v_dim;
  g.K = c.conv_kernel;
  g.conv_w = d.conv_w;
  g.dt_bias = d.dt_bias;
  g.a_neg = d.a_neg;
  g.norm_w = d.gnorm;
  g.eps = c.rms_eps;
  g.ring = st.conv + int64_t(d.lin_idx) * c.conv_kernel * cd;
  g.S = st.S + int64_t(d.lin_idx) * hv * int64_t(c.lin_v_dim) * c.lin_k_dim;
  g.cbuf = cbuf_;
  g.obuf = obuf_;
  g.chunked = gdn_tc_;
  g.chunked_min_n = kGdnTcMinN;
  g.ws = gdn_ws_;
  if (prec_ == kPrecBF16) g.y = ya_.hi;
  else g.y_f = stage_;
  prefill_gdn(g, s);
  timer_.mark("gdn.out", s);
  to_act(n, vd, ya_, s);
  gemm(ya_, vd, n, d.out, x_, H, kGemmAdd, kRoleOut, s);
}

void PrefillRunner::attn_layer(const DLayer& d, const PrefillState& st, int n, int pos0, cudaStream_t s) {
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden, qr = c.q_proj_rows(), kvd = c.kv_dim(), hd = c.head_dim;
  timer_.mark("attn.proj", s);
  gemm(xa_, H, n, d.q, proj_, P_, kGemmStore, kRoleAttnProj, s);
  gemm(xa_, H, n, d.k, proj_ + qr, P_, kGemmStore, kRoleAttnProj, s);
  gemm(xa_, H, n, d.v, proj_ + qr + kvd, P_, kGemmStore, kRoleAttnProj, s);
  timer_.mark("attn.flash", s);
  AttnChunkArgs a;
  a.proj = proj_;
  a.ldp = P_;
  a.n = n;
  a.pos0 = pos0;
  a.max_ctx = st.max_ctx;
  a.nq = c.n_q_heads;
  a.nkv = c.n_kv_heads;
  a.hd = hd;
  a.rope_dim = c.rope_dim;
  a.theta = c.rope_theta;
  a.eps = c.rms_eps;
  a.q_norm = d.q_norm;
  a.k_norm = d.k_norm;
  const int64_t slab = int64_t(c.n_kv_heads) * st.max_ctx * hd;
  a.kc = st.kv + (int64_t(d.full_idx) * 2 + 0) * slab;
  a.vc = st.kv + (int64_t(d.full_idx) * 2 + 1) * slab;
  a.qb = qb_;
  if (prec_ == kPrecBF16) a.out = ya_.hi;
  else a.out_f = stage_;
  a.precise = &d == mtp_.layer ? mtp_precise_ : attn_precise_[size_t(&d - m_.layers->data())] != 0;
  prefill_attn(a, s, simple_);
  timer_.mark("attn.out", s);
  to_act(n, c.n_q_heads * hd, ya_, s);
  gemm(ya_, c.n_q_heads * hd, n, d.o, x_, H, kGemmAdd, kRoleOut, s);
}

void PrefillRunner::moe_layer(const DLayer& d, int n, cudaStream_t s) {
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden, E = c.n_experts, k = c.top_k, I = c.expert_inter, Is = c.shared_inter;
  timer_.mark("moe.router", s);
  gemm(xa_, H, n, d.router, rl_, E, kGemmStore, kRoleRouter, s);
  gemm(xa_, H, n, d.shg, sg_, 1, kGemmStore, kRoleRouter, s);
  timer_.mark("moe.route", s);
  RouteArgs r;
  r.logits = rl_;
  r.n = n;
  r.E = E;
  r.k = k;
  r.idx = ridx_;
  r.w = rw_;
  r.counts = counts_;
  r.fill = fill_;
  r.tiles = tiles_;
  r.n_tiles = ntiles_;
  r.max_tiles = max_tiles_;
  r.tile_m = tile_rows(n);
  r.row_token = row_token_;
  r.slot_row = slot_row_;
  prefill_route(r, s);
  // routed experts: gate+up (SiLU * mul) on the gathered token rows, then down, both over the tile map
  timer_.mark("moe.gate_up", s);
  GemmArgs g;
  set_a(g, xa_, kRoleGateUp);
  g.lda = H;
  g.a_rows = row_token_;
  g.W0 = d.gate.m;
  g.W1 = d.up.m;
  g.w_stride = d.gate.w_stride;
  g.sb_stride = d.gate.sb_stride;
  g.tiles = tiles_;
  g.n_tiles = ntiles_;
  // grid: at most ceil(n k / tile_m) + min(E, n k) tiles are used (each active expert adds one partial tile); the
  // tile map's capacity (max_tiles_) would launch thousands of idle blocks at a few rows
  g.max_tiles = std::min(max_tiles_, (n * k + r.tile_m - 1) / r.tile_m + std::min(E, n * k));
  g.tile_m = r.tile_m;
  if (prec_ == kPrecBF16) g.Cb = acta_.hi;
  else g.C = stage_;
  g.ldc = I;
  if (d.up.w_stride != d.gate.w_stride || d.up.sb_stride != d.gate.sb_stride)
    throw Error("prefill: gate and up expert stacks differ in layout");
  prefill_gemm(g, kGemmSiluMul, s, simple_);
  timer_.mark("moe.down", s);
  to_act(n * k, I, acta_, s);
  GemmArgs dn = g;
  set_a(dn, acta_, kRoleDown);
  dn.lda = I;
  dn.a_rows = nullptr;
  dn.W0 = d.down.m;
  dn.W1 = DMat{};
  dn.w_stride = d.down.w_stride;
  dn.sb_stride = d.down.sb_stride;
  dn.Cb = nullptr;
  dn.C = yd_;
  dn.ldc = H;
  prefill_gemm(dn, kGemmStore, s, simple_);
  timer_.mark("moe.shared", s);
  // shared expert
  GemmArgs sh;
  set_a(sh, xa_, kRoleShGateUp);
  sh.lda = H;
  sh.M = n;
  sh.W0 = d.sh_gate;
  sh.W1 = d.sh_up;
  if (prec_ == kPrecBF16) sh.Cb = sacta_.hi;
  else sh.C = stage_;
  sh.ldc = Is;
  prefill_gemm(sh, kGemmSiluMul, s, simple_);
  to_act(n, Is, sacta_, s);
  gemm(sacta_, Is, n, d.sh_down, shd_, H, kGemmStore, kRoleShDown, s);
  timer_.mark("moe.combine", s);
  prefill_moe_combine(x_, shd_, sg_, 1, yd_, rw_, slot_row_, n, k, H, s);
}

void PrefillRunner::head(const float* norm, int n, int n_logits, float* out, float* hidden_out, cudaStream_t s) {
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden;
  const float eps = c.rms_eps;
  if (hidden_out) {
    if (!hout_) throw Error("prefill: hidden states asked without the MTP scratch (set_mtp)");
    prefill_rmsnorm_f32(x_, H, norm, n, H, eps, hout_, H, s);
    LILY_CUDA_CHECK(cudaMemcpyAsync(hidden_out, hout_, size_t(n) * H * 4, cudaMemcpyDeviceToHost, s));
  }
  timer_.mark("lm_head", s);
  for (int r0 = n - n_logits; r0 < n; r0 += kLogitRows) {
    const int rows = std::min(kLogitRows, n - r0);
    prefill_rmsnorm_act(x_ + int64_t(r0) * H, H, norm, rows, H, eps, prec_, xa_, s);
    gemm(xa_, H, rows, m_.lm_head, logits_, c.vocab, kGemmStore, kRoleHead, s);
    LILY_CUDA_CHECK(cudaMemcpyAsync(out + size_t(r0 - (n - n_logits)) * c.vocab, logits_,
                                    size_t(rows) * c.vocab * 4, cudaMemcpyDeviceToHost, s));
    LILY_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  if (hidden_out) LILY_CUDA_CHECK(cudaStreamSynchronize(s));
}

void PrefillRunner::run(const PrefillState& st, const int32_t* ids, int n, int pos0, int n_logits, float* out,
                        cudaStream_t s, float* hidden_out) {
  if (n <= 0) return;
  if (n > max_chunk_) throw Error("prefill: chunk larger than allocated");
  const ModelConfig& c = *m_.cfg;
  const int H = c.hidden;
  const float eps = c.rms_eps;
  rows_first_ = n < kColsFirstRows;
  LILY_CUDA_CHECK(cudaMemcpyAsync(ids_, ids, size_t(n) * 4, cudaMemcpyHostToDevice, s));
  timer_.mark("embed", s);
  prefill_embed(m_.embed, ids_, n, x_, s);
  for (const DLayer& d : *m_.layers) {
  timer_.mark("norm", s);
    prefill_rmsnorm_act(x_, H, d.in_norm, n, H, eps, prec_, xa_, s);
    if (d.is_full) attn_layer(d, st, n, pos0, s);
    else gdn_layer(d, st, n, pos0, s);
  timer_.mark("norm", s);
    prefill_rmsnorm_act(x_, H, d.post_norm, n, H, eps, prec_, xa_, s);
    moe_layer(d, n, s);
  }
  head(m_.final_norm, n, n_logits, out, hidden_out, s);
  if (timer_.on()) {
    timer_.mark(nullptr, s);
    LILY_CUDA_CHECK(cudaStreamSynchronize(s));
    timer_.collect();
  }
}

}  // namespace lily::cuda
