// CudaBackend: weight upload, per-sequence device state, the decode step (enqueued directly or replayed from a
// captured CUDA graph; its launch sequence is in cuda_step.cpp), forward() and on-device greedy decode.
#include "cuda/cuda_backend.h"

#include "core/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_factory.h"
#include "cuda/cuda_state.h"
#include "cuda/prefill/prefill_runner.h"
#include "cuda/weight_upload.h"
#include "engine/step_sampler.h"
#include "engine/vocab_trie.h"

namespace lily::cuda {

void* CudaBackend::dev_alloc(size_t bytes) {
  void* p = nullptr;
  LILY_CUDA_CHECK(cudaMalloc(&p, bytes));
  allocs_.push_back(p);
  return p;
}

void CudaBackend::dev_free(void* p) {
  for (auto& a : allocs_)
    if (a == p) {
      cudaFree(p);
      a = allocs_.back();
      allocs_.pop_back();
      return;
    }
}

DMat CudaBackend::upload(const QMatrix& q, const char* what, bool widen8, int refine) {
  DMat m = describe_matrix(q, what, widen8, refine);
  if (widen8 && q.kind == QMatrix::Kind::Affine && q.bits == 4) ++widened_;
  uint8_t* dw = static_cast<uint8_t*>(dev_alloc(dmat_w_bytes(m)));
  uint32_t* dsb = m.sb_row ? static_cast<uint32_t*>(dev_alloc(dmat_sb_words(m) * 4)) : nullptr;
  copy_matrix(q, m, dw, dsb);
  m.w = dw;
  m.sb = dsb;
  weight_bytes_ += dmat_w_bytes(m) + dmat_sb_words(m) * 4;
  if (m.fmt == kQ4Z) ++q4z_mats_;
  if (m.fmt == kQ4H) ++q4h_mats_;
  if (m.fmt == kI8) {
    ++i8z_mats_;
  } else if (m.fmt == kF8 || m.fmt == kQ6) {
    code8_mats_[m.fmt == kQ6] += 1;
    if (m.fmt == kF8) f8_group_ = m.group;
    code8_bytes_[m.fmt == kQ6] += dmat_w_bytes(m) + dmat_sb_words(m) * 4;
  }
  return m;
}

// Experts are uploaded back to back so that expert e is at a fixed stride from expert 0.
DStack CudaBackend::upload_stack(const ExpertStack& s, const char* what, bool widen8, int refine) {
  if (s.e.empty()) throw Error(std::string("cuda: empty expert stack ") + what);
  DStack st;
  st.m = describe_matrix(s.e[0], what, widen8, refine);
  if (widen8 && s.e[0].kind == QMatrix::Kind::Affine && s.e[0].bits == 4) widened_ += s.e.size();
  const size_t E = s.e.size(), wb = dmat_w_bytes(st.m), nsb = dmat_sb_words(st.m);
  uint8_t* dw = static_cast<uint8_t*>(dev_alloc(wb * E));
  uint32_t* dsb = nsb ? static_cast<uint32_t*>(dev_alloc(nsb * 4 * E)) : nullptr;
  const QMatrix& q0 = s.e[0];
  for (size_t e = 0; e < E; ++e) {  // expert 0's form for all (refine is the group's decision: not scanned again)
    const QMatrix& q = s.e[e];
    if (!q.valid() || q.kind != q0.kind || q.bits != q0.bits || q.gtype != q0.gtype || q.dtype != q0.dtype ||
        q.sdtype != q0.sdtype || q.rows != q0.rows || q.cols != q0.cols || q.group != q0.group)
      throw Error(std::string("cuda: experts of ") + what + " differ in shape or format");
    copy_matrix(q, st.m, dw + e * wb, dsb ? dsb + e * nsb : nullptr);
  }
  st.m.w = dw;
  st.m.sb = dsb;
  st.w_stride = int64_t(wb);
  st.sb_stride = int64_t(nsb);
  weight_bytes_ += (wb + nsb * 4) * E;
  if (st.m.fmt == kQ4Z) q4z_mats_ += E;
  if (st.m.fmt == kQ4H) q4h_mats_ += E;
  if (st.m.fmt == kI8) {
    i8z_mats_ += E;
  } else if (st.m.fmt == kF8 || st.m.fmt == kQ6) {
    code8_mats_[st.m.fmt == kQ6] += E;
    if (st.m.fmt == kF8) f8_group_ = st.m.group;
    code8_bytes_[st.m.fmt == kQ6] += (wb + nsb * 4) * E;
  }
  return st;
}

int CudaBackend::group_refine(std::initializer_list<const ExpertStack*> st, std::initializer_list<const QMatrix*> ms,
                              bool widen8) {
  auto all = [&](bool (*form)(const QMatrix&, bool)) {
    for (const ExpertStack* s : st)
      for (const QMatrix& q : s->e)
        if (!form(q, widen8)) return false;
    for (const QMatrix* q : ms)
      if (!form(*q, widen8)) return false;
    return true;
  };
  return all(exact_form) ? kRefineExact : all(half_form) ? kRefineHalf : kRefineNone;
}

// Whether the matrices hold affine 4-bit and 8-bit codes both (and nothing else).
bool CudaBackend::mixed_4_8(std::initializer_list<const QMatrix*> ms) {
  bool b4 = false, b8 = false;
  for (const QMatrix* q : ms) {
    if (!q || q->kind != QMatrix::Kind::Affine) return false;
    b4 = b4 || q->bits == 4;
    b8 = b8 || q->bits == 8;
  }
  return b4 && b8;
}

// The load log's lines for the matrices kept in 8-bit codes or as kQ4Z (the others are uploaded as the checkpoint
// stores them).
void CudaBackend::log_code8_uploads() const {
  const double mib = 1024.0 * 1024.0;
  if (code8_mats_[0])
    std::fprintf(stderr, "lily: cuda: %zu FP8 matrices kept as e4m3 codes with f32 scales per row and %d columns "
                 "(%.1f MiB on the device; dequantised inside the matrix kernels)\n", code8_mats_[0],
                 f8_group_, code8_bytes_[0] / mib);
  if (q4z_mats_)
    std::fprintf(stderr, "lily: cuda: %zu affine 4-bit matrices with zero points (scale * (q - z)) kept with f32 "
                 "scales to 2^-20 and their zeros in one word per group (kQ4Z, exact where bf16 pairs are not)\n",
                 q4z_mats_);
  if (q4h_mats_)
    std::fprintf(stderr, "lily: cuda: %zu affine 4-bit matrices with scales wider than bf16 and an independent bias "
                 "(GGUF Q4_K, Q4_1) kept with fp16 (scale, bias) pairs (kQ4H, 8x finer than bf16 pairs)\n", q4h_mats_);
  if (i8z_mats_)
    std::fprintf(stderr, "lily: cuda: %zu affine 8-bit matrices with zero points (scale * (q - z): GGUF Q8_0, Q5_0) "
                 "kept as int8 codes q - z with f32 scales (kI8, exact where bf16 pairs are not)\n", i8z_mats_);
  if (widened_)
    std::fprintf(stderr, "lily: cuda: %zu affine 4-bit MoE matrices uploaded as 8-bit codes (the same scales and "
                 "biases, exact) to share a kernel with the 8-bit projections beside them\n", widened_);
  if (code8_mats_[1])
    std::fprintf(stderr, "lily: cuda: %zu GGUF Q6_K matrices kept as 6-bit codes with the f32 scale d * sc of each "
                 "16 columns in one 16-byte chunk (kQ6, exact; %.1f MiB on the device; dequantised inside the matrix "
                 "kernels)\n", code8_mats_[1], code8_bytes_[1] / mib);
}

float* CudaBackend::upload_f32(const std::vector<float>& v) {
  float* d = static_cast<float*>(dev_alloc(std::max<size_t>(v.size(), 1) * 4));
  if (!v.empty()) LILY_CUDA_CHECK(cudaMemcpy(d, v.data(), v.size() * 4, cudaMemcpyHostToDevice));
  weight_bytes_ += v.size() * 4;
  return d;
}

// One decoder layer's weights on the device; n_lin / n_full count the layers of each kind so far (its slot).
DLayer CudaBackend::upload_layer(const LayerWeights& L, int& n_lin, int& n_full) {
  DLayer d;
  d.is_full = L.is_full;
  d.in_norm = upload_f32(L.in_norm);
  d.post_norm = upload_f32(L.post_norm);
  if (L.is_full) {
    d.full_idx = n_full++;
    d.q = upload(L.attn.q, "q_proj");
    d.k = upload(L.attn.k, "k_proj");
    d.v = upload(L.attn.v, "v_proj");
    d.o = upload(L.attn.o, "o_proj");
    d.q_norm = upload_f32(L.attn.q_norm);
    d.k_norm = upload_f32(L.attn.k_norm);
  } else {
    d.lin_idx = n_lin++;
    d.qkv = upload(L.lin.in_qkv, "in_proj_qkv");
    d.z = upload(L.lin.in_z, "in_proj_z");
    d.b = upload(L.lin.in_b, "in_proj_b");
    d.a = upload(L.lin.in_a, "in_proj_a");
    d.out = upload(L.lin.out, "out_proj");
    d.conv_w = upload_f32(L.lin.conv);
    d.dt_bias = upload_f32(L.lin.dt_bias);
    d.a_neg = upload_f32(L.lin.a_neg);
    d.gnorm = upload_f32(L.lin.norm);
  }
  // kQ4Z / kI8 (or kQ4H) only where every matrix a MoE kernel reads in one format takes it (router and shared gate;
  // gate / up with the shared ones; the down projections), else kQ4 / kQ8 for all of them
  const int z_r = group_refine({}, {&L.moe.router, &L.moe.sh_gate_w}, false);
  d.router = upload(L.moe.router, "router", false, z_r);
  d.shg = upload(L.moe.sh_gate_w, "shared_expert_gate", false, z_r);
  // the MoE kernels read gate / up / shared gate / up in one format and the down projections in one: where a
  // mixed recipe gives them affine 4- and 8-bit codes, the 4-bit ones are uploaded as 8-bit codes (exact)
  auto first = [](const ExpertStack& st) { return st.e.empty() ? nullptr : &st.e[0]; };  // empty: upload_stack
  const bool w_gu = mixed_4_8({first(L.moe.gate), first(L.moe.up), &L.moe.sh_gate, &L.moe.sh_up});
  const bool w_d = mixed_4_8({first(L.moe.down), &L.moe.sh_down});
  const int z_gu = group_refine({&L.moe.gate, &L.moe.up}, {&L.moe.sh_gate, &L.moe.sh_up}, w_gu);
  const int z_d = group_refine({&L.moe.down}, {&L.moe.sh_down}, w_d);
  d.gate = upload_stack(L.moe.gate, "experts.gate", w_gu, z_gu);
  d.up = upload_stack(L.moe.up, "experts.up", w_gu, z_gu);
  d.down = upload_stack(L.moe.down, "experts.down", w_d, z_d);
  d.sh_gate = upload(L.moe.sh_gate, "shared_expert.gate", w_gu, z_gu);
  d.sh_up = upload(L.moe.sh_up, "shared_expert.up", w_gu, z_gu);
  d.sh_down = upload(L.moe.sh_down, "shared_expert.down", w_d, z_d);
  return d;
}

// One decode row's scratch (RowScratch), zeroed where the kernels expect zeros at their first launch (the
// router-from-y parts, the DeltaNet head sums and XQ image, the barrier counters, the step control).
std::vector<CudaBackend::RowScratch> CudaBackend::alloc_rows(int n, int64_t* stride) {
  const ModelConfig& c = cfg_;
  const int G = c.n_kv_heads ? c.n_q_heads / c.n_kv_heads : 1;
  const size_t proj = std::max<size_t>(size_t(c.conv_dim()) + c.value_dim() + 2 * c.lin_v_heads,
                                       size_t(c.q_proj_rows()) + 2 * c.kv_dim());
  // the members in order, each from a 256-byte boundary
  const size_t bytes[] = {
      size_t(c.hidden) * 4,                                                          // x
      proj * 4,                                                                      // proj
      std::max<size_t>(c.value_dim(), size_t(c.n_q_heads) * c.head_dim) * 4,         // y
      size_t(c.n_experts) * 4,                                                       // rlogits
      16,                                                                            // shg
      // either layout of the router-from-y parts (element-major [E + 1][16], part-major [12][kMoePrePartStride])
      std::max(size_t(c.n_experts + 1) * kMoePreStride, size_t(kMoePreMaxParts) * kMoePrePartStride) * 4,  // pre
      size_t(c.lin_v_heads) * std::max(1, gdn_split_parts(c.lin_v_dim)) * 4,        // hss
      gdn_split_ ? xq_image_bytes(c.value_dim()) : 16,                               // yq
      32,                                                                            // route_done
      (size_t(c.top_k) * c.expert_inter + c.shared_inter) * 4,                       // act
      size_t(c.top_k) * 4,                                                           // ridx
      size_t(c.top_k) * 4,                                                           // rw
      size_t(std::max(c.n_kv_heads, 1)) * kAttnPartSlots * (size_t(G) * c.head_dim + 2 * G) * 4,  // part
      size_t(c.vocab) * 4,                                                           // logits
      sizeof(StepCtl)};                                                              // ctl
  size_t row = 0;
  for (size_t b : bytes) row += (b + 255) / 256 * 256;
  auto* base = static_cast<uint8_t*>(dev_alloc(row * size_t(n)));
  LILY_CUDA_CHECK(cudaMemset(base, 0, row * size_t(n)));  // zero where the kernels expect it (counters, parts)
  if (stride) *stride = int64_t(row);
  std::vector<RowScratch> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    uint8_t* p = base + size_t(i) * row;
    size_t k = 0;
    auto take = [&]() {
      void* q = p;
      p += (bytes[k++] + 255) / 256 * 256;
      return q;
    };
    RowScratch& r = rows[size_t(i)];
    r.x = static_cast<float*>(take());
    r.proj = static_cast<float*>(take());
    r.y = static_cast<float*>(take());
    r.rlogits = static_cast<float*>(take());
    r.shg = static_cast<float*>(take());
    r.pre = static_cast<float*>(take());
    r.hss = static_cast<float*>(take());
    r.yq = take();
    if (!gdn_split_) r.yq = nullptr;  // the only case enqueue_step hands it over
    r.route_done = static_cast<unsigned int*>(take());
    r.act = static_cast<float*>(take());
    r.ridx = static_cast<int32_t*>(take());
    r.rw = static_cast<float*>(take());
    r.part = static_cast<float*>(take());
    r.logits = static_cast<float*>(take());
    r.ctl = static_cast<StepCtl*>(take());
  }
  return rows;
}

void CudaBackend::swap_scratch(RowScratch& r) {
  std::swap(x_, r.x);
  std::swap(proj_, r.proj);
  std::swap(y_, r.y);
  std::swap(rlogits_, r.rlogits);
  std::swap(shg_, r.shg);
  std::swap(pre_, r.pre);
  std::swap(hss_, r.hss);
  std::swap(yq_, r.yq);
  std::swap(route_done_, r.route_done);
  std::swap(act_, r.act);
  std::swap(ridx_, r.ridx);
  std::swap(rw_, r.rw);
  std::swap(part_, r.part);
  std::swap(logits_, r.logits);
  std::swap(ctl_, r.ctl);
}

CudaBackend::CudaBackend(std::shared_ptr<ModelWeights> w, CudaOptions opt) : w_(std::move(w)), opt_(opt) {
  cfg_ = w_->cfg;
  const ModelConfig& c = cfg_;
  set_decode_int8_x(opt_.int8_x);  // process-wide; set again by each enqueue_step (backends may differ)
  LILY_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  embed_ = upload(w_->embed, "embed");
  lm_head_ = upload(w_->lm_head, "lm_head");
  final_norm_ = upload_f32(w_->final_norm);
  int n_lin = 0, n_full = 0;
  Progress bar("uploading", uint64_t(c.n_layers));  // drawn only on a terminal
  for (int i = 0; i < c.n_layers; ++i) {
    bar.add(1);
    layers_.push_back(upload_layer(w_->layers[size_t(i)], n_lin, n_full));
  }
  log_code8_uploads();
  gdn_split_ = gdn_split_parts(cfg_.lin_v_dim) > 0;
  // the plain step's scratch is row 0 of kMaxRows laid out at one stride (a verify's rows in one launch)
  std::vector<RowScratch> rows = alloc_rows(kMaxRows, &rows_stride_);
  swap_scratch(rows[0]);
  qk_read_ = static_cast<unsigned int*>(dev_alloc(size_t(std::max(c.lin_k_heads, 1)) * 4));
  LILY_CUDA_CHECK(cudaMemset(qk_read_, 0, size_t(std::max(c.lin_k_heads, 1)) * 4));
  if (opt_.trace) {
    trace_ = static_cast<unsigned long long*>(dev_alloc(kTraceSlots * 8));
    LILY_CUDA_CHECK(cudaMemset(trace_, 0, kTraceSlots * 8));
  }
  if (opt_.trace == 2) {
    const size_t bytes = size_t(2) * kMoeBtraceBlocks * kMoeBtraceSlots * 8;
    btrace_ = static_cast<unsigned long long*>(dev_alloc(bytes));
    LILY_CUDA_CHECK(cudaMemset(btrace_, 0, bytes));
  }
  LILY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&ctl_host_), sizeof(StepCtl)));
  *ctl_host_ = StepCtl{};
  in_ids_ = static_cast<int32_t*>(dev_alloc((kRing + 1) * 4));
  out_ids_ = static_cast<int32_t*>(dev_alloc(kRing * 4));
  LILY_CUDA_CHECK(cudaMemset(in_ids_, 0, (kRing + 1) * 4));
  adj_ = static_cast<float*>(dev_alloc(size_t(c.vocab) * 4));
  table_ = static_cast<uint32_t*>(dev_alloc(size_t(c.vocab) * 4));
  LILY_CUDA_CHECK(cudaMemset(table_, 0, size_t(c.vocab) * 4));
  sw_ = static_cast<SampWork*>(dev_alloc(samp_work_bytes(c.vocab)));
  LILY_CUDA_CHECK(cudaMemset(sw_, 0, samp_work_bytes(c.vocab)));
  LILY_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host_ids_), kRing * 4, cudaHostAllocMapped));
  LILY_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_ids_dev_), host_ids_, 0));
  mask_ = static_cast<uint32_t*>(dev_alloc(size_t(mask_words(c.vocab)) * 4));
  LILY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&mask_host_), size_t(mask_words(c.vocab)) * 4));
  for (auto& e : ev_) LILY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  if (c.n_kv_heads > 8) throw Error("cuda: more than 8 kv heads");
  if (opt_.prefill) {
    PrefillModel pm;
    pm.cfg = &cfg_;
    pm.embed = embed_;
    pm.lm_head = lm_head_;
    pm.final_norm = final_norm_;
    pm.layers = &layers_;
    // Default chunk: 4096 tokens where the device has >= 40 GiB (H200, 4K prompt: 16.6k tok/s vs 14.8k at 2048;
    // ~1 GB of scratch), else 2048 (~0.5 GB, so that 24 GB cards keep room for the KV cache).
    int max_chunk = opt_.prefill_max_chunk;
    if (max_chunk <= 0) {
      size_t free_b = 0, total_b = 0;
      LILY_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
      max_chunk = total_b >= (size_t(40) << 30) ? 4096 : 2048;
    }
    prefill_ = std::make_unique<PrefillRunner>(pm, max_chunk, [this](size_t b) { return dev_alloc(b); },
                                               opt_.prefill_simple, opt_.prefill_prec, opt_.profile);
  }
  if (opt_.router_y) setup_router_y();
  upload_mtp();
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() {
  if (trace_) print_trace();
  if (prof_steps_ > 0) {
    double tot = 0;
    for (auto& p : prof_ms_) tot += p.second;
    std::fprintf(stderr, "cuda profile over %d steps (ungraphed, per step):\n", prof_steps_);
    for (auto& p : prof_ms_)
      std::fprintf(stderr, "  %-22s %9.1f us  %5.1f%%\n", p.first.c_str(), 1e3 * p.second / prof_steps_,
                   100.0 * p.second / tot);
    std::fprintf(stderr, "  %-22s %9.1f us\n", "total", 1e3 * tot / prof_steps_);
  }
  for (cudaGraphExec_t g : graphs_)
    if (g) cudaGraphExecDestroy(g);
  drop_rows_graphs();
  if (rows_ctl_host_) cudaFreeHost(rows_ctl_host_);
  for (auto& e : ev_)
    if (e) cudaEventDestroy(e);
  if (host_ids_) cudaFreeHost(host_ids_);
  if (mask_host_) cudaFreeHost(mask_host_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (void* p : allocs_) cudaFree(p);
  if (ctl_host_) cudaFreeHost(ctl_host_);
  if (mtp_io_.ctl_host) cudaFreeHost(mtp_io_.ctl_host);
  if (stream_) cudaStreamDestroy(stream_);
}

// LILY_PROFILE=trace: the last step's stamps of the first attention layer + its MoE (slots 0..31, us from the
// attention kernel's entry) and of the first DeltaNet layer + its MoE (slots 32..63, us from its in_proj's entry).
void CudaBackend::print_trace() const {
  unsigned long long t[kTraceSlots] = {};
  if (cudaMemcpy(t, trace_, sizeof(t), cudaMemcpyDeviceToHost) != cudaSuccess) return;
  const char* moe[16] = {"router entry", "router after pdl_wait", "router x loaded", "router rows done (block 0)",
                         "router last block starts top-k", "router top-k done", "gate_up entry",
                         "gate_up after pdl_wait", "gate_up x loaded", "gate_up rows done (block 0)", "down entry",
                         "down after pdl_wait", "down rows done (block 0)", "down last block entry",
                         "down last block done", 0};
  {  // moe_route_gate_up's stamps, then down's with early_route (the fused form every layer of the model takes)
    const char* fused[16] = {"router+gate_up entry", "  after pdl_wait", "  x loaded", "  router + shared rows done (b0)",
                             "  barrier passed (b0)", "  top-k done (b0)", "  top-k done (last block)",
                             "  last block done", "down act loaded (b0)", "down before pdl_wait (b0)",
                             "down entry (b0)", "  past the routing flag", "  rows done (b0)", "  last block entry",
                             "  last block done", "down after pdl_wait (b0)"};
    for (int i = 0; i < 16; ++i) moe[i] = fused[i];
  }
  const char* attn[16] = {"attn entry", "attn after pdl_wait", "attn prologue done", "attn scan done (block 0)",
                          "attn published (block 0)", "attn last block starts merge", "attn merge done",
                          "attn q/k/v in shared memory (b0)", "attn q/k normed (b0)", "attn first K/V rows done (b0)",
                          "attn merge weights ready (b0)", "attn merge first sum written (b0)", "MoE x loads landed (b0)",
                          "MoE x norm reduced (b0)", "down act loads landed (b0)"};
  const char* gdn[16] = {"in_proj entry (b0)", "in_proj x loaded (b0)", "in_proj last block done", "gdn entry (b0)",
                         "gdn after pdl_wait (b0)", "gdn rows done (b0)", "gdn last block done", "out_proj entry (b0)",
                         "out_proj x loaded (b0)", "out_proj last block done", "gdn conv done (b0)",
                         "gdn norms done (b0)", "MoE x loads landed (b0)", "MoE x norm reduced (b0)",
                         "down act loads landed (b0)", "gdn before pdl_wait (b0)"};
  auto line = [&](const char* name, int slot, int base) {  // a stamp, us from the section's first one
    if (name && t[base] && t[slot])
      std::fprintf(stderr, "  %-34s %8.2f\n", name, double(int64_t(t[slot] - t[base])) / 1e3);
  };
  auto print = [&](const char* title, int base, const char* const* first) {
    if (!t[base]) return;
    std::fprintf(stderr, "cuda trace (%s, last step; us from its first stamp):\n", title);
    for (int i = 0; i < 32; ++i) line(i < 16 ? first[i] : moe[i - 16], base + i, base);
  };
  print("first attention layer + its MoE", 0, attn);
  print("first DeltaNet layer + its MoE", 32, gdn);
  line("gdn StepCtl read (b0)", 64, 32);  // slots 64.. belong to the DeltaNet section
  line("gdn pre-wait loads issued (b0)", 65, 32);
  if (btrace_ && t[32]) print_btrace(t[32]);
  print_step_trace(t);
}

// The whole step from the every-layer end stamps (slots 80 + layer) and the lm_head's (66..71): each layer's time
// from the previous layer's end, averaged per layer kind.
void CudaBackend::print_step_trace(const unsigned long long* t) const {
  const int n = std::min(int(layers_.size()), kTraceSlots - 80);
  double sum[2] = {0, 0};
  int cnt[2] = {0, 0};
  for (int i = 1; i < n; ++i) {
    if (!t[80 + i] || !t[79 + i]) return;
    const int k = layers_[size_t(i)].is_full ? 1 : 0;
    sum[k] += double(int64_t(t[80 + i] - t[79 + i])) / 1e3;
    ++cnt[k];
  }
  std::fprintf(stderr, "cuda trace (whole step, last step): layer 0 ends %.2f us before the last layer's end\n",
               double(int64_t(t[79 + n] - t[80])) / 1e3);
  if (cnt[0]) std::fprintf(stderr, "  DeltaNet layer (end to end, mean of %d) %8.2f\n", cnt[0], sum[0] / cnt[0]);
  if (cnt[1]) std::fprintf(stderr, "  attention layer (end to end, mean of %d) %7.2f\n", cnt[1], sum[1] / cnt[1]);
  if (t[66] && t[68]) {
    auto us = [&](int a, int b) { return double(int64_t(t[b] - t[a])) / 1e3; };
    std::fprintf(stderr, "  lm_head: entry (b0) %.2f, after pdl_wait (b0) %.2f, rows done (last block) %.2f us "
                 "from the last layer's end\n", us(79 + n, 66), us(79 + n, 67), us(79 + n, 68));
    if (t[71] && t[71] != ~0ull)
      std::fprintf(stderr, "  lm_head: first block's entry %.2f, last block's entry %.2f\n", us(79 + n, 71),
                   us(79 + n, 70));
  }
}

void CudaBackend::print_btrace(unsigned long long base) const {
  std::vector<unsigned long long> b(size_t(2) * kMoeBtraceBlocks * kMoeBtraceSlots);
  if (cudaMemcpy(b.data(), btrace_, b.size() * 8, cudaMemcpyDeviceToHost) != cudaSuccess) return;
  const char* names[2][kMoeBtraceSlots] = {
      {"entry", "after pdl_wait", "parts summed", "routing ranked", "first rows requested", "x prologue done",
       "routing published", "first pair done", "block done", nullptr},
      {"entry", "routing flag seen", "rows requested", "after pdl_wait", "act prologue done", "first row done",
       "ids in shared memory", "rows issued (before out row)", "block done", nullptr}};
  for (int k = 0; k < 2; ++k) {
    std::fprintf(stderr, "cuda block trace (first DeltaNet layer, %s; us from in_proj's entry): min p10 p50 p90 max "
                 "(block of the max)\n", k ? "MoE down" : "fused MoE router + gate_up");
    for (int i = 0; i < kMoeBtraceSlots; ++i) {
      if (!names[k][i]) continue;
      std::vector<std::pair<double, int>> v;
      for (int blk = 0; blk < kMoeBtraceBlocks; ++blk) {
        const unsigned long long s = b[(size_t(k) * kMoeBtraceBlocks + blk) * kMoeBtraceSlots + i];
        if (s) v.emplace_back(double(int64_t(s - base)) / 1e3, blk);
      }
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      auto q = [&](double f) { return v[size_t(f * double(v.size() - 1) + 0.5)].first; };
      std::fprintf(stderr, "  %-24s %4zu blocks %8.2f %8.2f %8.2f %8.2f %8.2f (%d)\n", names[k][i], v.size(), q(0),
                   q(0.1), q(0.5), q(0.9), v.back().first, v.back().second);
    }
  }
}

std::unique_ptr<SeqState> CudaBackend::new_state(int max_ctx) {
  if (max_ctx < 1) throw Error("cuda: max_ctx must be positive");
  return std::make_unique<CudaState>(this, cfg_, max_ctx, has_mtp_);
}

void CudaBackend::fill_context_for_timing(SeqState& sst, int n) {
  auto* st = dynamic_cast<CudaState*>(&sst);
  if (!st) throw Error("cuda: foreign SeqState");
  if (n < 0 || n > st->max_ctx) throw Error("cuda: context for timing exceeds the state's capacity");
  LILY_CUDA_CHECK(cudaMemsetAsync(st->kv, 0, st->kv_bytes, stream_));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st->pos = n;
}

// Points the device step control at `st` (its buffers and position), with in_ids[0..n_given) given.
void CudaBackend::begin(CudaState& st, int n_given) {
  StepCtl& h = *ctl_host_;
  h = StepCtl{};
  h.kv = st.kv;
  h.S = st.S;
  h.conv = st.conv;
  h.pos = st.pos;
  h.max_ctx = st.max_ctx;
  h.cursor = 0;
  h.n_given = n_given;
  LILY_CUDA_CHECK(cudaMemcpyAsync(ctl_, ctl_host_, sizeof(StepCtl), cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::mark(const char* what) {
  if (!opt_.profile) return;
  cudaEvent_t e;
  LILY_CUDA_CHECK(cudaEventCreate(&e));
  LILY_CUDA_CHECK(cudaEventRecord(e, stream_));
  marks_.push_back({what, e});
}

void CudaBackend::run_step(StepPart part) {
  if (!opt_.graph) {
    enqueue_step(stream_, part);
    if (opt_.profile) {
      LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
      for (size_t i = 1; i < marks_.size(); ++i) {
        float ms = 0.f;
        LILY_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i - 1].ev, marks_[i].ev));
        auto it = std::find_if(prof_ms_.begin(), prof_ms_.end(),
                               [&](const auto& p) { return p.first == marks_[i].what; });
        if (it == prof_ms_.end()) prof_ms_.push_back({marks_[i].what, double(ms)});
        else it->second += ms;
      }
      for (auto& m : marks_) LILY_CUDA_CHECK(cudaEventDestroy(m.ev));
      marks_.clear();
      ++prof_steps_;
    }
    return;
  }
  LILY_CUDA_CHECK(cudaGraphLaunch(step_graph(part), stream_));
}

// The step's graph for `part`, captured (not launched) on first use: the kernels read the sequence from ctl_ when
// they run, so a capture needs no state.
cudaGraphExec_t CudaBackend::step_graph(StepPart part) {
  cudaGraphExec_t& graph = graphs_[int(part)];
  if (!graph) {
    cudaGraph_t g = nullptr;
    LILY_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
    try {
      enqueue_step(stream_, part);
    } catch (...) {
      cudaStreamEndCapture(stream_, &g);
      if (g) cudaGraphDestroy(g);
      throw;
    }
    LILY_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
    LILY_CUDA_CHECK(cudaGraphInstantiate(&graph, g, 0));
    LILY_CUDA_CHECK(cudaGraphDestroy(g));
    LILY_CUDA_CHECK(cudaGraphUpload(graph, stream_));  // pre-stage the graph on the device
  }
  return graph;
}

int CudaBackend::default_prefill_chunk() const { return prefill_ ? prefill_->max_chunk() : kRing; }

void CudaBackend::forward(SeqState& sst, const int32_t* ids, int n, int n_logits, float* out,
                          const ForwardOptions& opt) {
  auto& st = dynamic_cast<CudaState&>(sst);
  if (n < 0 || n_logits < 0 || n_logits > n) throw Error("cuda forward: bad n / n_logits");
  if (st.pos + n > st.max_ctx)
    throw Error("cuda forward: context full (" + std::to_string(st.pos + n) + " > " + std::to_string(st.max_ctx) + ")");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab) throw Error("cuda forward: token id out of range: " + std::to_string(ids[i]));
  // batched prefill, chunk by chunk; with the MTP block also for one token when the hidden states are asked for
  const bool hook = opt.on_hidden && has_mtp_;
  if ((n > 1 || hook) && prefill_) {
    const int chunk = std::min(prefill_chunk_or_default(opt.prefill_chunk), prefill_->max_chunk());
    const PrefillState ps{st.kv, st.S, st.conv, st.max_ctx};
    std::vector<float> hid(hook ? size_t(std::min(chunk, n)) * cfg_.hidden : 0);
    for (int done = 0; done < n;) {
      if (opt.cancelled && opt.cancelled()) throw Cancelled();
      const int m = std::min(chunk, n - done);
      const int lo = std::max(done, n - n_logits), want = std::max(0, done + m - lo);
      prefill_->run(ps, ids + done, m, st.pos, want, want ? out + size_t(lo - (n - n_logits)) * cfg_.vocab : nullptr,
                    stream_, hook ? hid.data() : nullptr);
      LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
      if (hook) opt.on_hidden(hid.data(), st.pos, m);
      st.pos += m;
      done += m;
      if (opt.progress) opt.progress(done, n);
    }
    return;
  }
  const int chunk = std::min(kRing, opt.prefill_chunk > 0 ? opt.prefill_chunk : kRing);
  for (int done = 0; done < n;) {
    if (opt.cancelled && opt.cancelled()) throw Cancelled();
    const int m = std::min(chunk, n - done);
    begin(st, m);
    LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, ids + done, size_t(m) * 4, cudaMemcpyHostToDevice, stream_));
    for (int i = 0; i < m; ++i) {
      run_step();
      const int gi = done + i;  // global index of the token just consumed
      if (gi >= n - n_logits) {
        LILY_CUDA_CHECK(cudaMemcpyAsync(out + size_t(gi - (n - n_logits)) * cfg_.vocab, logits_,
                                        size_t(cfg_.vocab) * 4, cudaMemcpyDeviceToHost, stream_));
      }
    }
    LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    st.pos += m;
    done += m;
    if (opt.progress) opt.progress(done, n);
  }
}

void CudaBackend::decode_argmax(SeqState& sst, int n_steps, int32_t first_id, int32_t* out_ids) {
  auto& st = dynamic_cast<CudaState&>(sst);
  if (n_steps <= 0) return;
  if (st.pos + n_steps > st.max_ctx) throw Error("cuda decode: context full");
  if (first_id < 0 || first_id >= cfg_.vocab) throw Error("cuda decode: token id out of range");
  int32_t id = first_id;
  for (int done = 0; done < n_steps;) {
    const int m = std::min(kRing, n_steps - done);
    begin(st, 1);
    LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, &id, 4, cudaMemcpyHostToDevice, stream_));
    for (int i = 0; i < m; ++i) run_step();
    LILY_CUDA_CHECK(cudaMemcpyAsync(out_ids + done, out_ids_, size_t(m) * 4, cudaMemcpyDeviceToHost, stream_));
    LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
    st.pos += m;
    done += m;
    id = out_ids[done - 1];
  }
}

// Sampled decode with the step sampler inside the step's graph. The host keeps at most two steps queued ahead of
// the token it is reading (step j+1 consumes s_j, so it may run before on_token(s_j) answers; step j+2 is queued
// only after on_token(s_j) said continue): the GPU never waits for the host, and a stop leaves exactly one step of
// lookahead consumed (Backend::decode_sample's contract). The ids come back through mapped pinned memory, each
// read after its step's event; the ring of kRing inputs is restarted (one drain) every kRing steps.
// With a mask (constrained decoding) each token takes two launches: the layers and lm_head (kLogits), then the step
// sampler with the allowed-token mask (kSampleMasked). The forward of step j + 1 is enqueued as soon as s_j is read,
// before on_token(s_j) and the mask of s_{j+1} run on the host, so the mask is computed while the layers run; its
// upload and the sampler follow in stream order, and only the id comes back. A mask that allows nothing stops
// before its token.
int CudaBackend::decode_sample(SeqState& sst, StepSampler& sampler, int32_t first_id, int max_steps,
                               const std::function<bool(int32_t)>& on_token, float* last_logits,
                               const TokenMaskFn& mask) {
  if (!opt_.device_sampler)
    return Backend::decode_sample(sst, sampler, first_id, max_steps, on_token, last_logits, mask);
  auto& st = dynamic_cast<CudaState&>(sst);
  if (max_steps <= 0) return 0;
  if (st.pos + max_steps > st.max_ctx) throw Error("cuda decode: context full");
  if (first_id < 0 || first_id >= cfg_.vocab) throw Error("cuda decode: token id out of range");
  if (sampler.vocab() != cfg_.vocab) throw Error("cuda decode: sampler vocabulary differs from the model's");
  const int pos0 = st.pos;
  LILY_CUDA_CHECK(cudaMemcpyAsync(table_, sampler.table().data(), size_t(cfg_.vocab) * 4, cudaMemcpyHostToDevice,
                                  stream_));
  samp_init(sw_, sampler.params(), sampler.step(), stream_);
  begin(st, 1);
  LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, &first_id, 4, cudaMemcpyHostToDevice, stream_));
  int enq = 0;  // steps enqueued (with a mask: forward halves); step q (0-based) runs at cursor q % kRing
  auto enqueue = [&](StepPart part) {
    if (enq > 0 && enq % kRing == 0) {  // ring used up: drain, restart at cursor 0 with the last id as input
      LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
      st.pos = pos0 + enq;
      begin(st, 1);
      LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, in_ids_ + kRing, 4, cudaMemcpyDeviceToDevice, stream_));
    }
    run_step(part);
    LILY_CUDA_CHECK(cudaEventRecord(ev_[enq % kEvents], stream_));
    ++enq;
  };
  auto read_id = [&](int j) {  // the id of sampled step j (1-based), after its event
    LILY_CUDA_CHECK(cudaEventSynchronize(ev_[(j - 1) % kEvents]));
    const int32_t id = reinterpret_cast<volatile int32_t*>(host_ids_)[(j - 1) % kRing];
    sampler.record(id);
    return id;
  };
  try {
    if (!mask) {
      enqueue(StepPart::kSample);
      if (max_steps >= 2) enqueue(StepPart::kSample);
      for (int j = 1; j <= max_steps; ++j) {
        const int32_t id = read_id(j);
        if (!on_token(id)) break;
        if (j + 2 <= max_steps) enqueue(StepPart::kSample);
      }
    } else {
      const size_t mask_bytes = size_t(mask_words(cfg_.vocab)) * 4;
      enqueue(StepPart::kLogits);
      for (int j = 1; j <= max_steps; ++j) {
        if (!mask(mask_host_)) break;
        LILY_CUDA_CHECK(cudaMemcpyAsync(mask_, mask_host_, mask_bytes, cudaMemcpyHostToDevice, stream_));
        run_step(StepPart::kSampleMasked);
        LILY_CUDA_CHECK(cudaEventRecord(ev_[(j - 1) % kEvents], stream_));
        const int32_t id = read_id(j);
        if (j < max_steps) enqueue(StepPart::kLogits);  // consumes id while the host takes it and makes the next mask
        if (!on_token(id)) break;
      }
    }
  } catch (...) {
    cudaStreamSynchronize(stream_);
    st.pos = pos0 + enq;
    throw;
  }
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.pos = pos0 + enq;
  if (last_logits)
    LILY_CUDA_CHECK(cudaMemcpy(last_logits, logits_, size_t(cfg_.vocab) * 4, cudaMemcpyDeviceToHost));
  return enq;
}

}  // namespace lily::cuda

namespace lily {

bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<ModelWeights> w) {
  if (!w) throw Error("cuda: no weights");
  return std::make_unique<cuda::CudaBackend>(std::move(w), cuda::CudaOptions::from_env());
}

}  // namespace lily
