// CudaBackend's decode step: the launch sequence of one token (embed, 40 layers, lm_head + argmax or the step
// sampler), enqueued directly or captured once as a CUDA graph by run_step (cuda_backend.cpp); and the load-time
// set-up of the router-from-y side rows it uses (unless LILY_CUDA_ROUTER_Y=0).
#include "cuda/cuda_backend.h"

#include <algorithm>

#include "cuda/common/cuda_check.h"
#include "cuda/decode/router_y.h"

namespace lily::cuda {

// Router-from-y where the layer allows it: the fused MoE kernel (router over the experts' input), E <= 256 with the
// router and shared gate in one 8-bit or bf16 format, in and out projections of whole 512-column pieces, at most
// kMoePreMaxParts of them.
void CudaBackend::setup_router_y() {
  const ModelConfig& c = cfg_;
  size_t scratch_floats = 0;
  for (const DLayer& d : layers_)
    scratch_floats = std::max(scratch_floats, compose_router_scratch_floats(c.n_experts, c.hidden,
                                                                            (d.is_full ? d.o : d.out).cols));
  float* scratch = static_cast<float*>(dev_alloc(scratch_floats * 4));  // one for all layers (stream order)
  for (DLayer& d : layers_) {
    const DMat& O = d.is_full ? d.o : d.out;
    const DMat& R = d.router;
    // A as one part by the DeltaNet step's own blocks (split form), else pieces of in_proj / q/k/v
    const bool a_gdn = gdn_split_ && !d.is_full && c.hidden <= 2048;
    const int pa = a_gdn ? 1 : c.hidden / kGemvSidePiece, pm = O.cols / kGemvSidePiece, rows = c.n_experts + 1;
    if (R.cols != d.gate.m.cols || c.n_experts > 256 || (R.fmt != kQ8 && R.fmt != kBF16) ||
        d.shg.fmt != R.fmt || d.shg.group != R.group || d.shg.row_bytes != R.row_bytes || c.hidden % kGemvSidePiece ||
        O.cols % kGemvSidePiece || pa < 1 || pm < 1 || pa + pm > kMoePreMaxParts)
      continue;
    d.ry_m = static_cast<uint16_t*>(dev_alloc(size_t(rows) * O.cols * 2));
    d.ry_m_scale = static_cast<float*>(dev_alloc(size_t(rows) * 4));
    d.ry_pa = pa;
    d.ry_pm = pm;
    d.ry_a_gdn = a_gdn;
    d.ry_a = static_cast<uint16_t*>(dev_alloc(size_t(rows) * c.hidden * 2));
    d.ry_a_scale = static_cast<float*>(dev_alloc(size_t(rows) * 4));
    compose_router(R, d.shg, d.post_norm, O, d.ry_m, d.ry_m_scale, scratch, stream_, d.ry_a, d.ry_a_scale);
  }
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  dev_free(scratch);
}

// Segments that read the same normalised x: one launch per weight format among them (one in all where they share
// it; the FP8 layout keeps in_proj_a / in_proj_b in bf16 beside the e4m3 qkv and z). side (optional): side rows of
// the first launch; trace: of a single launch only.
void CudaBackend::gemv_shared_x(GemvSeg* segs, int n, const float* norm_w, cudaStream_t s,
                                unsigned long long* trace, const GemvSide* side) {
  GemvSeg group[kMaxSegs];
  bool done[kMaxSegs] = {};
  bool first = true;
  for (int i = 0; i < n; ++i) {
    if (done[i]) continue;
    int ng = 0;
    for (int j = i; j < n; ++j)
      if (!done[j] && segs[j].m.fmt == segs[i].m.fmt) {
        group[ng++] = segs[j];
        done[j] = true;
      }
    const bool all = first && ng == n;
    gemv(group, ng, x_, norm_w, cfg_.rms_eps, s, opt_.pdl, all ? trace : nullptr, nullptr, first ? side : nullptr,
         rows_);
    first = false;
  }
}

// Router-from-y's side rows of layer d: A = W_r diag(post_norm) x in parts 0 .. ry_pa - 1 of pre_ (int16 rows of
// W_r diag(post_norm) on the raw x), by the DeltaNet step's own blocks (ry_a_gdn: one part) or as side rows of
// in_proj or q/k/v (side_a); B = M y as side rows of the out projection (side_m, the next ry_pm parts). Part p of
// element e at pre_[p * kMoePrePartStride + e] (part-major). No rows (rows 0) where the layer routes as usual.
void CudaBackend::router_y_sides(const DLayer& d, GemvSide& side_a, GemvSide& side_m) const {
  const bool ry = d.ry_m != nullptr;
  const int ps = kMoePrePartStride, es = 1, rows = cfg_.n_experts + 1;
  side_a = {d.ry_a, d.ry_a_scale, pre_, ry && !d.ry_a_gdn ? rows : 0, d.ry_pa, ps, es, ry};
  side_m = {d.ry_m, d.ry_m_scale, pre_ + d.ry_pa * ps, ry ? rows : 0, d.ry_pm, ps, es, false};
}

// A DeltaNet layer's mixer: in_proj (4 segments) -> the DeltaNet step -> out_proj into the residual.
void CudaBackend::enqueue_gdn(const DLayer& d, const GemvSide& side_a, const GemvSide& side_m, cudaStream_t s) {
  const ModelConfig& c = cfg_;
  const float eps = c.rms_eps;
  const bool pdl = opt_.pdl, ry = d.ry_m != nullptr;
  const int es = 1;
  const int cd = c.conv_dim(), vd = c.value_dim(), hv = c.lin_v_heads;
  GemvSeg segs[4] = {{d.qkv, proj_, 0}, {d.z, proj_ + cd, 0}, {d.b, proj_ + cd + vd, 0},
                     {d.a, proj_ + cd + vd + hv, 0}};
  unsigned long long* gtr = trace_ && d.lin_idx == 0 ? trace_ + 32 : nullptr;  // LILY_PROFILE=trace slots 32..
  gemv_shared_x(segs, 4, d.in_norm, s, gtr, &side_a);
  mark("gdn in_proj gemv");
  GdnArgs g;
  g.qkv = proj_;
  g.z = proj_ + cd;
  g.b = proj_ + cd + vd;
  g.a = proj_ + cd + vd + hv;
  g.conv_w = d.conv_w;
  g.dt_bias = d.dt_bias;
  g.a_neg = d.a_neg;
  g.norm_w = d.gnorm;
  g.layer = d.lin_idx;
  g.Hk = c.lin_k_heads;
  g.Hv = hv;
  g.Dk = c.lin_k_dim;
  g.Dv = c.lin_v_dim;
  g.K = c.conv_kernel;
  g.eps = eps;
  g.y = y_;
  g.ctl = ctl_;
  g.trace = gtr ? gtr + 3 : nullptr;
  g.hss = gdn_split_ ? hss_ : nullptr;  // split form: out_proj applies the gated norm's RMS factor
  // and y goes to out_proj in its int8 form where out_proj takes that path
  const bool yq = gdn_split_ && use_int8_x(d.out.fmt, d.out.cols);
  g.yq = yq ? yq_ : nullptr;
  if (ry && d.ry_a_gdn) {  // router-from-y's A by the step's own blocks (part 0 of pre_)
    g.ra_m = d.ry_a;
    g.ra_scale = d.ry_a_scale;
    g.ra_x = x_;
    g.ra_out = pre_;
    g.ra_rows = c.n_experts + 1;
    g.ra_cols = c.hidden;
    g.ra_stride = es;
  }
  if (rows_.n > 1) {  // a verify's rows: the states after each but the last to the snapshot slots
    g.rows = rows_;
    for (int i = 0; i + 1 < rows_.n; ++i) g.snap[i] = snaps_[size_t(i)];
    g.snap_conv = int64_t(snap_s_bytes_ / 4);
    g.qk_read = qk_read_;
  }
  gdn_decode(g, s, pdl);
  mark("gdn recurrence");
  GemvSeg o = {d.out, x_, 1};
  const HeadNorm hn = {hss_, c.lin_v_dim, gdn_split_parts(c.lin_v_dim), eps, g.yq};
  gemv(&o, 1, y_, nullptr, eps, s, pdl, gtr ? gtr + 7 : nullptr, gdn_split_ ? &hn : nullptr, &side_m, rows_);
  mark("gdn out_proj gemv");
}

// An attention layer's mixer: q/k/v -> attention -> o_proj into the residual.
void CudaBackend::enqueue_attn(const DLayer& d, const GemvSide& side_a, const GemvSide& side_m, cudaStream_t s) {
  const ModelConfig& c = cfg_;
  const float eps = c.rms_eps;
  const bool pdl = opt_.pdl;
  const int qr = c.q_proj_rows(), kvd = c.kv_dim();
  GemvSeg segs[3] = {{d.q, proj_, 0}, {d.k, proj_ + qr, 0}, {d.v, proj_ + qr + kvd, 0}};
  gemv_shared_x(segs, 3, d.in_norm, s, nullptr, &side_a);
  mark("attn qkv gemv");
  AttnArgs a;
  a.q = proj_;
  a.k = proj_ + qr;
  a.v = proj_ + qr + kvd;
  a.q_norm = d.q_norm;
  a.k_norm = d.k_norm;
  a.layer = d.full_idx;
  a.nq = c.n_q_heads;
  a.nkv = c.n_kv_heads;
  a.hd = c.head_dim;
  a.rope_dim = c.rope_dim;
  a.theta = c.rope_theta;
  a.eps = eps;
  a.part = part_;
  a.out = y_;
  a.ctl = ctl_;
  const bool tr = trace_ && d.full_idx == 0;
  a.trace = tr ? trace_ : nullptr;
  for (int r = 0; r < rows_.n; ++r) {  // a verify's rows one after another (row r at pos + r sees rows < r)
    AttnArgs ar = a;
    const int64_t st = rows_.stride;
    ar.q = row_at(a.q, r, st);
    ar.k = row_at(a.k, r, st);
    ar.v = row_at(a.v, r, st);
    ar.part = row_at(a.part, r, st);
    ar.out = row_at(a.out, r, st);
    ar.ctl = row_at(a.ctl, r, st);
    attn_decode(ar, s, pdl);
  }
  mark("attention");
  GemvSeg o = {d.o, x_, 1};
  gemv(&o, 1, y_, nullptr, eps, s, pdl, nullptr, nullptr, &side_m, rows_);
  mark("attn o_proj gemv");
}

int CudaBackend::layer_index(const DLayer& d) const {
  const auto p = reinterpret_cast<uintptr_t>(&d), b = reinterpret_cast<uintptr_t>(layers_.data());
  if (p < b || p >= b + layers_.size() * sizeof(DLayer)) return -1;
  return int((p - b) / sizeof(DLayer));
}

// A layer's MoE: router + gate_up (one launch where the router reads the experts' input), then down into the residual.
void CudaBackend::enqueue_moe(const DLayer& d, cudaStream_t s) {
  const ModelConfig& c = cfg_;
  const float eps = c.rms_eps;
  const bool pdl = opt_.pdl, ry = d.ry_m != nullptr;
  const int ps = kMoePrePartStride, es = 1;
  MoeArgs m;
  m.x = x_;
  m.norm_w = d.post_norm;
  m.eps = eps;
  m.router = d.router;
  m.shg_w = d.shg;
  m.logits = rlogits_;
  m.shg = shg_;
  m.route_done = route_done_;
  m.trace = nullptr;  // LILY_PROFILE=trace: MoE of the first attention (slots 16..) and DeltaNet (48..) layers
  if (trace_ && d.is_full && d.full_idx == 0) m.trace = trace_ + 16;
  if (trace_ && !d.is_full && d.lin_idx == 0) m.trace = trace_ + 48;
  m.trace_x = m.trace ? m.trace - 4 : nullptr;  // slots 12..14 / 44..46 (free in the mixer's range)
  m.btrace = btrace_ && !d.is_full && d.lin_idx == 0 ? btrace_ : nullptr;  // trace 2
  const int li = layer_index(d);
  m.trace_end = trace_ && li >= 0 && li < kTraceSlots - 80 ? trace_ + 80 + li : nullptr;
  m.E = c.n_experts;
  m.k = c.top_k;
  m.gate = d.gate;
  m.up = d.up;
  m.down = d.down;
  m.sh_gate = d.sh_gate;
  m.sh_up = d.sh_up;
  m.sh_down = d.sh_down;
  m.act = act_;
  m.route_idx = ridx_;
  m.route_w = rw_;
  m.out = x_;
  // router and gate_up as one launch where the router reads the experts' input (every layer of the model; routers
  // in 8-bit codes with f32 scales or Q6_K blocks, which no checkpoint has, and kQ4Z / kQ4H / kQ8H routers beside experts
  // in another format take the two launches)
  const bool fused = m.router.cols == m.gate.m.cols && !fmt_code8(m.router.fmt) && m.router.fmt != kQ6 &&
                     (m.router.fmt != kQ4Z || m.gate.m.fmt == kQ4Z) && (m.router.fmt != kQ4H || m.gate.m.fmt == kQ4H) &&
                     (m.router.fmt != kQ8H || m.gate.m.fmt == kQ8H);
  m.early_route = fused;
  if (fused && ry) {
    m.pre = pre_;
    m.pre_parts = d.ry_pa + d.ry_pm;
    m.pre_es = es;
    m.pre_ps = ps;
  }
  m.rows = rows_;
  if (rows_.n > 1) set_decode_grid_share(rows_.n);  // a verify's rows side by side, each on 1/n of the grid
  if (fused) {
    moe_route_gate_up(m, s, pdl);
    mark("moe router + gate_up");
  } else {
    moe_router(m, s, pdl);  // requires router and shared-expert gate in one format (checked there)
    mark("moe router");
    moe_gate_up(m, s, pdl);
    mark("moe gate_up");
  }
  moe_down(m, s, pdl);
  mark("moe down");
  if (rows_.n > 1) set_decode_grid_share(1);
}

// One decode step: embed in_ids[cursor], all layers, lm_head + argmax or the step sampler (advances cursor and pos
// on the device); kLogits stops after lm_head's logits, kSampleMasked is the sampler alone, with the mask.
void CudaBackend::enqueue_step(cudaStream_t s, StepPart part) {
  const ModelConfig& c = cfg_;
  const float eps = c.rms_eps;
  const bool pdl = opt_.pdl;
  auto sampler_args = [&] {
    SampArgs a;
    a.logits = logits_;
    a.adj = adj_;
    a.table = table_;
    a.V = c.vocab;
    a.work = sw_;
    a.in_ids = in_ids_;
    a.out_ids = out_ids_;
    a.host_ids = host_ids_dev_;
    a.ctl = ctl_;
    return a;
  };
  mark(nullptr);
  if (part == StepPart::kSampleMasked) {
    SampArgs a = sampler_args();
    a.mask = mask_;
    sample_step(a, s, pdl, false);  // first in its launch: no kernel before it to overlap
    mark("step sampler");
    return;
  }
  set_decode_int8_x(opt_.int8_x);  // the launchers below read it (this backend's choice, not the last constructed)
  embed(embed_, in_ids_, ctl_, x_, s, false);
  mark("embed");
  for (const DLayer& d : layers_) enqueue_layer(d, s);
  lm_head_argmax(lm_head_, x_, final_norm_, eps, logits_, in_ids_, part == StepPart::kArgmax ? out_ids_ : nullptr,
                 ctl_, s, pdl, trace_ ? trace_ + 66 : nullptr);
  mark("lm_head argmax");
  if (part == StepPart::kSample) {
    sample_step(sampler_args(), s, pdl);
    mark("step sampler");
  }
}

void CudaBackend::enqueue_layer(const DLayer& d, cudaStream_t s) {
  GemvSide side_a, side_m;
  router_y_sides(d, side_a, side_m);
  if (d.is_full) enqueue_attn(d, side_a, side_m, s);
  else enqueue_gdn(d, side_a, side_m, s);
  enqueue_moe(d, s);
}

}  // namespace lily::cuda
