// The CUDA backend's speculative-decoding pieces (engine/backend.h, engine/speculative.h):
//  - the MTP block on the device (upload_mtp) and its forward through the prefill runner (run_mtp) with the
//    block's own KV cache in the CudaState (rows stored at their position; mtp_rows of them in use);
//  - verify: n decode steps, plain decoding's own kernels and numerics (lossless), with a device copy of the
//    DeltaNet recurrent + conv states (the only state a forward changes in place) after each of the first n - 1;
//    with the step graph on, the n rows go through each decode kernel at once (cuda_verify.cpp: weights read once
//    for all rows, the DeltaNet state carried through them on chip and written to a snapshot after each), else one
//    step after another (verify_decode_steps, the reference); accept(m < n) copies the one after m tokens back (the
//    KV rows before the kept position are final, those past it are overwritten later);
//    A verify of one token is one decode step (the speculative loop's plain steps, which auto-off times as plain
//    decoding's cost). A verify of the n rows in one forward of the prefill runner measured slower and, with the
//    runner's other numerics, not lossless (docs/performance-log.md).
#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_state.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_runner.h"

namespace lily::cuda {

namespace {

CudaState& cuda_state(SeqState& s) {
  auto* st = dynamic_cast<CudaState*>(&s);
  if (!st) throw Error("cuda backend: state was made by another backend");
  return *st;
}

struct CudaUndo final : VerifyUndo {
  const CudaState* st = nullptr;  // the state verified
  uint64_t ticket = 0;            // CudaBackend::snap_ticket_ of this verify (its snapshots)
  int pos = 0;
  std::vector<int32_t> ids;
};

}  // namespace

void CudaBackend::upload_mtp() {
  if (!w_->mtp || !prefill_) return;
  const MtpWeights& m = *w_->mtp;
  if (!m.layer.is_full) throw Error("cuda: the MTP decoder layer is not a full-attention layer");
  mtp_fc_ = upload(m.fc, "mtp.fc");
  mtp_norm_e_ = upload_f32(m.pre_norm_e);
  mtp_norm_h_ = upload_f32(m.pre_norm_h);
  mtp_norm_ = upload_f32(m.norm);
  int n_lin = 0, n_full = 0;
  mtp_layer_ = upload_layer(m.layer, n_lin, n_full);  // full_idx 0: the state's MTP KV cache
  PrefillMtp pm;
  pm.fc = mtp_fc_;
  pm.norm_e = mtp_norm_e_;
  pm.norm_h = mtp_norm_h_;
  pm.norm = mtp_norm_;
  pm.layer = &mtp_layer_;
  prefill_->set_mtp(pm, [this](size_t b) { return dev_alloc(b); });
  vhid_ = static_cast<float*>(dev_alloc(size_t(kMaxVerifyDecode) * cfg_.hidden * 4));
  const size_t H = size_t(cfg_.hidden);
  mtp_io_.ids = static_cast<int32_t*>(dev_alloc(size_t(kMaxVerifyDecode + 1) * 4));
  mtp_io_.hid = static_cast<float*>(dev_alloc(size_t(kMaxVerifyDecode) * H * 4));
  mtp_io_.cat = static_cast<float*>(dev_alloc(2 * H * 4));
  mtp_io_.hout = static_cast<float*>(dev_alloc(size_t(kMaxVerifyDecode) * H * 4));
  mtp_io_.out = static_cast<int32_t*>(dev_alloc(size_t(kMaxVerifyDecode) * 4));
  LILY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&mtp_io_.ctl_host), sizeof(StepCtl) * kMaxVerifyDecode));
  mtp_sc_ = alloc_rows(1)[0];
  has_mtp_ = true;
  // The speculative loop's plain steps (verify of one token) replay the argmax step's graph; captured now, so that
  // the first one (which auto-off times as plain decoding's cost) does not include the capture.
  if (opt_.graph) step_graph(StepPart::kArgmax);
}

std::string CudaBackend::mtp_unavailable_reason() const {
  if (w_->mtp_tensors.empty() && !w_->mtp)
    return "the checkpoint has no multi-token-prediction weights (mtp.*); --mtp-from DIR reads them from another "
           "checkpoint of the model";
  if (!w_->mtp) return "the multi-token-prediction weights were not loaded (--mtp off)";
  return "cuda: multi-token prediction runs through the batched prefill, which LILY_CUDA_PREFILL=decode turns off";
}

std::string CudaBackend::mtp_default_off_reason() const {
  return "cuda: speculative decoding is exact here but measured slower than plain decoding (a verify of k+1 rows costs "
         "0.73-0.91x as much as k+1 plain steps); --mtp K turns it on";
}

int CudaBackend::mtp_rows(const SeqState& s) const {
  const auto* st = dynamic_cast<const CudaState*>(&s);
  if (!st) throw Error("cuda backend: state was made by another backend");
  if (!has_mtp_) throw Error(mtp_unavailable_reason());
  return st->mtp_rows;
}

void CudaBackend::mtp_truncate(SeqState& s, int rows) {
  CudaState& st = cuda_state(s);
  if (!has_mtp_) throw Error(mtp_unavailable_reason());
  if (rows < 0 || rows > st.mtp_rows)
    throw Error("mtp_truncate: " + std::to_string(rows) + " rows asked, the cache holds " + std::to_string(st.mtp_rows));
  st.mtp_rows = rows;  // the rows beyond are overwritten by the next ones
}

void CudaBackend::mtp_forward(SeqState& s, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                              float* logits, float* hidden_out) {
  mtp_forward_checked(s, ids, hidden, n, pos0, n_logits, logits, hidden_out, nullptr);
}

void CudaBackend::mtp_forward_checked(SeqState& s, const int32_t* ids, const float* hidden, int n, int pos0,
                                      int n_logits, float* logits, float* hidden_out, int32_t* argmax) {
  if (!has_mtp_) throw Error(mtp_unavailable_reason());
  CudaState& st = cuda_state(s);
  const ModelConfig& c = cfg_;
  if (n < 1 || n_logits < 0 || n_logits > n) throw Error("mtp_forward: bad row/logit counts");
  if (!ids || !hidden || (n_logits > 0 && !logits)) throw Error("mtp_forward: missing ids, hidden rows or logits");
  if (pos0 < 0 || pos0 + n > st.max_ctx)
    throw Error("mtp_forward: positions " + std::to_string(pos0) + ".." + std::to_string(pos0 + n - 1) +
                " do not fit the state's " + std::to_string(st.max_ctx));
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= c.vocab)
      throw Error("token id " + std::to_string(ids[i]) + " out of range [0, " + std::to_string(c.vocab) + ")");
  // Rows live at their position: rows past pos0 are dropped; a gap (a state whose last positions have no MTP
  // rows, e.g. resumed from the session cache) is filled with zero rows, which the attention reads as empty keys.
  if (pos0 > st.mtp_rows) {
    const size_t slab = size_t(st.max_ctx) * c.head_dim * 2;
    LILY_CUDA_CHECK(cudaMemset2DAsync(st.mtp_kv + size_t(st.mtp_rows) * c.head_dim, slab, 0,
                                      size_t(pos0 - st.mtp_rows) * c.head_dim * 2, size_t(2) * c.n_kv_heads,
                                      stream_));
  }
  if (n <= kMaxVerifyDecode && !opt_.profile) {
    mtp_decode_rows(st, ids, hidden, n, pos0, n_logits, logits, hidden_out, argmax);
    return;
  }
  if (argmax) throw Error("mtp_forward: an argmax is only taken on the decode kernels' rows");
  const PrefillState ps{st.mtp_kv, nullptr, nullptr, st.max_ctx};
  const int chunk = prefill_->max_chunk(), H = c.hidden;
  for (int done = 0; done < n;) {
    const int m = std::min(chunk, n - done);
    const int lo = std::max(done, n - n_logits), want = std::max(0, done + m - lo);
    prefill_->run_mtp(ps, ids + done, hidden + size_t(done) * H, m, pos0 + done, want,
                      want ? logits + size_t(lo - (n - n_logits)) * c.vocab : nullptr,
                      hidden_out ? hidden_out + size_t(done) * H : nullptr, stream_);
    done += m;
  }
  st.mtp_rows = pos0 + n;
}

void CudaBackend::mtp_decode_rows(CudaState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                                  float* logits, float* hidden_out, int32_t* argmax) {
  const ModelConfig& c = cfg_;
  const int H = c.hidden;
  const float eps = c.rms_eps;
  const bool pdl = opt_.pdl;
  LILY_CUDA_CHECK(cudaMemcpyAsync(mtp_io_.ids, ids, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
  LILY_CUDA_CHECK(cudaMemcpyAsync(mtp_io_.hid, hidden, size_t(n) * H * 4, cudaMemcpyHostToDevice, stream_));
  unsigned long long *tr = trace_, *btr = btrace_;  // the stamps belong to plain steps
  trace_ = btrace_ = nullptr;
  swap_scratch(mtp_sc_);
  try {
    for (int j = 0; j < n; ++j) {
      StepCtl& h = mtp_io_.ctl_host[j];
      h = StepCtl{};
      h.kv = st.mtp_kv;  // the layer's full_idx is 0: the MTP cache
      h.pos = pos0 + j;
      h.max_ctx = st.max_ctx;
      h.cursor = j;
      h.n_given = n;
      LILY_CUDA_CHECK(cudaMemcpyAsync(ctl_, &h, sizeof(StepCtl), cudaMemcpyHostToDevice, stream_));
      embed(embed_, mtp_io_.ids, ctl_, x_, stream_, false);
      prefill_rmsnorm_f32(x_, H, mtp_norm_e_, 1, H, eps, mtp_io_.cat, 2 * H, stream_);
      prefill_rmsnorm_f32(mtp_io_.hid + size_t(j) * H, H, mtp_norm_h_, 1, H, eps, mtp_io_.cat + H, 2 * H, stream_);
      GemvSeg fc = {mtp_fc_, x_, 0};
      gemv(&fc, 1, mtp_io_.cat, nullptr, eps, stream_, false);
      enqueue_layer(mtp_layer_, stream_);  // no router-from-y rows: the block's layer routes as usual
      if (hidden_out)
        prefill_rmsnorm_f32(x_, H, mtp_norm_, 1, H, eps, mtp_io_.hout + size_t(j) * H, H, stream_);
      const bool top = argmax && j == n - 1;
      if (j >= n - n_logits || top) {
        lm_head_argmax(lm_head_, x_, mtp_norm_, eps, logits_, mtp_io_.ids, top ? mtp_io_.out : nullptr, ctl_, stream_,
                       pdl);
        if (j >= n - n_logits && logits)
          LILY_CUDA_CHECK(cudaMemcpyAsync(logits + size_t(j - (n - n_logits)) * c.vocab, logits_,
                                          size_t(c.vocab) * 4, cudaMemcpyDeviceToHost, stream_));
        if (top)
          LILY_CUDA_CHECK(cudaMemcpyAsync(argmax, mtp_io_.out + j, 4, cudaMemcpyDeviceToHost, stream_));
      }
    }
  } catch (...) {
    swap_scratch(mtp_sc_);
    trace_ = tr;
    btrace_ = btr;
    throw;
  }
  swap_scratch(mtp_sc_);
  trace_ = tr;
  btrace_ = btr;
  if (hidden_out)
    LILY_CUDA_CHECK(cudaMemcpyAsync(hidden_out, mtp_io_.hout, size_t(n) * H * 4, cudaMemcpyDeviceToHost, stream_));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.mtp_rows = pos0 + n;
}

float* CudaBackend::snap(size_t i, size_t bytes) {
  if (snap_bytes_ != bytes) {  // one size per backend (the states' shapes come from its config)
    for (float* p : snaps_) dev_free(p);
    snaps_.clear();
    drop_rows_graphs();  // they write the old slots
    snap_bytes_ = bytes;
  }
  while (snaps_.size() <= i) snaps_.push_back(static_cast<float*>(dev_alloc(std::max<size_t>(bytes, 16))));
  return snaps_[i];
}

void CudaBackend::save_states(const CudaState& st, size_t slot) {
  float* d = snap(slot, st.s_bytes + st.conv_bytes);
  LILY_CUDA_CHECK(cudaMemcpyAsync(d, st.S, st.s_bytes, cudaMemcpyDeviceToDevice, stream_));
  LILY_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<char*>(d) + st.s_bytes, st.conv, st.conv_bytes,
                                  cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::restore_states(CudaState& st, size_t slot) {
  const float* d = snap(slot, st.s_bytes + st.conv_bytes);
  LILY_CUDA_CHECK(cudaMemcpyAsync(st.S, d, st.s_bytes, cudaMemcpyDeviceToDevice, stream_));
  LILY_CUDA_CHECK(cudaMemcpyAsync(st.conv, reinterpret_cast<const char*>(d) + st.s_bytes, st.conv_bytes,
                                  cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::verify_decode_steps(CudaState& st, const int32_t* ids, int n, float* logits, float* hidden,
                                      int32_t* ids_out) {
  if (n > kMaxVerifyDecode)
    throw Error("cuda verify: " + std::to_string(n) + " rows, at most " + std::to_string(kMaxVerifyDecode) +
                " as decode steps");
  const int H = cfg_.hidden;
  begin(st, n);
  LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, ids, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
  for (int i = 0; i < n; ++i) {
    run_step(StepPart::kArgmax);  // writes out_ids_[i]
    if (logits)
      LILY_CUDA_CHECK(cudaMemcpyAsync(logits + size_t(i) * cfg_.vocab, logits_, size_t(cfg_.vocab) * 4,
                                      cudaMemcpyDeviceToHost, stream_));
    if (hidden) prefill_rmsnorm_f32(x_, H, final_norm_, 1, H, cfg_.rms_eps, vhid_ + size_t(i) * H, H, stream_);
    if (i < n - 1) save_states(st, size_t(i));  // the DeltaNet states after i + 1 tokens, for accept(i + 1)
  }
  if (hidden)
    LILY_CUDA_CHECK(cudaMemcpyAsync(hidden, vhid_, size_t(n) * H * 4, cudaMemcpyDeviceToHost, stream_));
  if (ids_out) LILY_CUDA_CHECK(cudaMemcpyAsync(ids_out, out_ids_, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.pos += n;
}

std::unique_ptr<VerifyUndo> CudaBackend::verify(SeqState& s, const int32_t* ids, int n, float* logits, float* hidden) {
  if (!logits) throw Error("verify: the logits of every row are required");
  return verify_rows(s, ids, n, logits, hidden, nullptr);
}

std::unique_ptr<VerifyUndo> CudaBackend::verify_argmax(SeqState& s, const int32_t* ids, int n, int32_t* ids_out,
                                                       float* hidden) {
  if (!ids_out) throw Error("verify_argmax: the ids of every row are required");
  return verify_rows(s, ids, n, nullptr, hidden, ids_out);
}

int32_t CudaBackend::mtp_argmax(SeqState& s, const int32_t* ids, const float* hidden, int n, int pos0,
                                float* hidden_out) {
  if (n > kMaxVerifyDecode || opt_.profile) return Backend::mtp_argmax(s, ids, hidden, n, pos0, hidden_out);
  int32_t id = 0;
  mtp_forward_checked(s, ids, hidden, n, pos0, 0, nullptr, hidden_out, &id);
  return id;
}

std::unique_ptr<VerifyUndo> CudaBackend::verify_rows(SeqState& s, const int32_t* ids, int n, float* logits,
                                                     float* hidden, int32_t* ids_out) {
  if (!has_mtp_) throw Error(mtp_unavailable_reason());
  CudaState& st = cuda_state(s);
  if (n < 1) throw Error("verify: expected at least one token, got " + std::to_string(n));
  if (n > prefill_->max_chunk())
    throw Error("verify: " + std::to_string(n) + " rows, more than a prefill chunk (" +
                std::to_string(prefill_->max_chunk()) + ")");
  if (st.pos + n > st.max_ctx)
    throw Error("cuda verify: context full (" + std::to_string(st.pos + n) + " > " + std::to_string(st.max_ctx) + ")");
  for (int i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab) throw Error("cuda verify: token id out of range: " + std::to_string(ids[i]));
  auto u = std::make_unique<CudaUndo>();
  u->st = &st;
  u->pos = st.pos;
  u->ids.assign(ids, ids + n);
  u->ticket = ++snap_ticket_;
  if (n >= 2 && n <= kMaxRows && rows_ready()) verify_batch(st, ids, n, logits, hidden, ids_out);
  else verify_decode_steps(st, ids, n, logits, hidden, ids_out);
  return u;
}

void CudaBackend::accept(SeqState& s, VerifyUndo& undo, int m) {
  CudaState& st = cuda_state(s);
  auto* u = dynamic_cast<CudaUndo*>(&undo);
  if (!u) throw Error("accept: the undo record was made by another backend");
  if (u->st != &st) throw Error("accept: the undo record belongs to another state");
  const int n = static_cast<int>(u->ids.size());
  if (m < 1 || m > n) throw Error("accept: " + std::to_string(m) + " tokens kept of " + std::to_string(n));
  if (st.pos != u->pos + n) throw Error("accept: the state moved since its verify");
  if (m == n) return;
  if (u->ticket != snap_ticket_) throw Error("accept: another verify ran since this one (its snapshots are gone)");
  // the DeltaNet states after m tokens; the KV rows before pos + m are final
  restore_states(st, size_t(m - 1));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.pos = u->pos + m;
}

}  // namespace lily::cuda
