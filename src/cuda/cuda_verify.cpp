// The speculative verify as a wavefront (CudaBackend::verify_wave, cuda_backend.h): the n rows' decode steps
// captured once per n into one graph, layer by layer, row i on a stream of its own with its own scratch and step
// control; its layer-l mixer kernel (DeltaNet step or attention, the only kernels that read what the previous row
// left: the recurrent and conv states, the KV row) waits for row i - 1's, and row i - 1's DeltaNet state of that
// layer is first copied into snapshot slot i - 1 on a side stream (for accept). The attention kernels run one at a
// time across the rows (row 0's after the last row's of the previous attention layer): each one's split blocks wait
// for each other, so two partly resident at once could wait for each other's room. Each row runs plain decoding's
// kernels on the same inputs, so logits and states equal plain decoding's bit for bit; the rest of the rows'
// kernels overlap.
#include <algorithm>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_state.h"
#include "cuda/decode/state_snapshot.h"
#include "cuda/prefill/prefill.h"

namespace lily::cuda {

namespace {

SnapShape snap_shape(const ModelConfig& c, int n_lin) {
  SnapShape sh;
  sh.n_lin = n_lin;
  sh.Hv = c.lin_v_heads;
  sh.Dv = c.lin_v_dim;
  sh.Dk = c.lin_k_dim;
  sh.conv_dim = c.conv_dim();
  sh.K = c.conv_kernel;
  return sh;
}

}  // namespace

bool CudaBackend::wave_wait(const DLayer& d, cudaStream_t s) {
  const int li = layer_index(d);
  if (wave_.row < 0 || li < 0) return false;
  const size_t L = layers_.size();
  if (wave_.row > 0) {  // the previous row's step of this layer (its state, its KV row)
    LILY_CUDA_CHECK(cudaStreamWaitEvent(s, wave_ev_[size_t(wave_.row - 1) * L + size_t(li)], 0));
    return true;
  }
  if (!d.is_full) return false;
  for (int p = li - 1; p >= 0; --p)  // row 0's attention: after the last row's of the previous attention layer
    if (layers_[size_t(p)].is_full) {
      LILY_CUDA_CHECK(cudaStreamWaitEvent(s, wave_ev_[size_t(wave_.n - 1) * L + size_t(p)], 0));
      return true;
    }
  return false;
}

void CudaBackend::wave_signal(const DLayer& d, cudaStream_t s) {
  const int li = layer_index(d);
  if (wave_.row < 0 || li < 0) return;
  const size_t L = layers_.size(), k = size_t(wave_.row) * L + size_t(li);
  if (d.is_full) {  // the KV row is written: the next row's attention (or row 0's next one) may start
    LILY_CUDA_CHECK(cudaEventRecord(wave_ev_[k], s));
    return;
  }
  if (wave_.row + 1 >= wave_.n) return;  // the last row's state needs no snapshot
  int n_lin = 0;
  for (const DLayer& e : layers_) n_lin += !e.is_full;
  cudaEvent_t stepped = wave_ev_[kMaxWave * L + k];
  LILY_CUDA_CHECK(cudaEventRecord(stepped, s));
  LILY_CUDA_CHECK(cudaStreamWaitEvent(wave_.side, stepped, 0));
  gdn_state_snapshot(ctl_, d.lin_idx, snap_shape(cfg_, n_lin), snaps_[size_t(wave_.row)], wave_.side);
  LILY_CUDA_CHECK(cudaEventRecord(wave_ev_[k], wave_.side));
}

cudaGraphExec_t CudaBackend::wave_graph(int n) {
  cudaGraphExec_t& graph = wave_graphs_[n];
  if (graph) return graph;
  const size_t L = layers_.size();
  if (!wave_streams_[0]) {
    for (cudaStream_t& s : wave_streams_) LILY_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    wave_ev_.assign(2 * kMaxWave * L + 1 + 2 * kMaxWave, nullptr);
    for (cudaEvent_t& e : wave_ev_) LILY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  cudaEvent_t fork = wave_ev_[2 * kMaxWave * L];
  struct Restore {  // the launch settings of plain steps, back however the capture ends
    CudaBackend& b;
    unsigned long long *tr, *btr;
    bool pdl;
    ~Restore() {
      set_decode_grid_share(1);
      b.opt_.pdl = pdl;
      b.trace_ = tr;
      b.btrace_ = btr;
    }
  } restore{*this, trace_, btrace_, opt_.pdl};
  trace_ = btrace_ = nullptr;  // the stamps belong to plain steps
  cudaGraph_t g = nullptr;
  LILY_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  int swapped = -1;
  try {
    LILY_CUDA_CHECK(cudaEventRecord(fork, stream_));
    set_decode_int8_x(opt_.int8_x);  // as enqueue_step
    // each row's GEMV, MoE and lm_head kernels take 1/n of the resident grid, so the rows' kernels run side by
    // side instead of taking turns on the whole GPU; above 2 rows without PDL (a launched dependent's waiting
    // blocks would hold room the other rows could use): docs/performance-log.md
    set_decode_grid_share(n);
    if (n > 2) opt_.pdl = false;
    // the rows' launches layer by layer (a row may wait only for events captured before), each with its scratch
    auto as_row = [&](int i, auto&& launches) {
      if (i > 0) swap_scratch(wave_rows_[size_t(swapped = i - 1)]);
      wave_ = {i, n, wave_streams_[kMaxWave + i]};
      launches(wave_streams_[i]);
      wave_ = {};
      if (swapped >= 0) swap_scratch(wave_rows_[size_t(swapped)]);
      swapped = -1;
    };
    for (int i = 0; i < n; ++i) {
      LILY_CUDA_CHECK(cudaStreamWaitEvent(wave_streams_[i], fork, 0));
      LILY_CUDA_CHECK(cudaStreamWaitEvent(wave_streams_[kMaxWave + i], fork, 0));
      as_row(i, [&](cudaStream_t rs) { embed(embed_, in_ids_, ctl_, x_, rs, false); });
    }
    for (const DLayer& d : layers_)
      for (int i = 0; i < n; ++i) as_row(i, [&](cudaStream_t rs) { enqueue_layer(d, rs); });
    for (int i = 0; i < n; ++i) {
      as_row(i, [&](cudaStream_t rs) {
        lm_head_argmax(lm_head_, x_, final_norm_, cfg_.rms_eps, logits_, in_ids_, out_ids_, ctl_, rs, opt_.pdl);
      });
      for (int j = 0; j < 2; ++j) {  // both streams joined back into the origin
        cudaEvent_t e = wave_ev_[2 * kMaxWave * L + 1 + 2 * size_t(i) + j];
        LILY_CUDA_CHECK(cudaEventRecord(e, wave_streams_[j ? kMaxWave + i : i]));
        LILY_CUDA_CHECK(cudaStreamWaitEvent(stream_, e, 0));
      }
    }
  } catch (...) {
    wave_ = {};
    if (swapped >= 0) swap_scratch(wave_rows_[size_t(swapped)]);
    cudaStreamEndCapture(stream_, &g);
    if (g) cudaGraphDestroy(g);
    throw;
  }
  LILY_CUDA_CHECK(cudaStreamEndCapture(stream_, &g));
  const cudaError_t e = cudaGraphInstantiate(&graph, g, 0);
  cudaGraphDestroy(g);
  LILY_CUDA_CHECK(e);
  LILY_CUDA_CHECK(cudaGraphUpload(graph, stream_));
  return graph;
}

void CudaBackend::verify_wave(CudaState& st, const int32_t* ids, int n, float* logits, float* hidden,
                              int32_t* ids_out) {
  if (n < 2 || n > kMaxWave) throw Error("cuda verify: a wavefront takes 2 to " + std::to_string(kMaxWave) + " rows");
  const ModelConfig& c = cfg_;
  const int H = c.hidden;
  for (int i = 0; i + 1 < n; ++i) snap(size_t(i), st.s_bytes + st.conv_bytes);  // before the capture reads them
  while (wave_rows_.size() + 1 < size_t(n)) wave_rows_.push_back(alloc_scratch());
  if (!wave_ctl_host_) {
    LILY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&wave_ctl_host_), sizeof(StepCtl) * kMaxWave));
  }
  auto row = [&](int i) -> const RowScratch* { return i ? &wave_rows_[size_t(i - 1)] : nullptr; };
  for (int i = 0; i < n; ++i) {
    StepCtl& h = wave_ctl_host_[i];
    h = StepCtl{};
    h.kv = st.kv;
    h.S = st.S;
    h.conv = st.conv;
    h.pos = st.pos + i;
    h.max_ctx = st.max_ctx;
    h.cursor = i;
    h.n_given = n;
    LILY_CUDA_CHECK(cudaMemcpyAsync(i ? row(i)->ctl : ctl_, &h, sizeof(StepCtl), cudaMemcpyHostToDevice, stream_));
  }
  LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, ids, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
  LILY_CUDA_CHECK(cudaGraphLaunch(wave_graph(n), stream_));
  for (int i = 0; i < n; ++i) {
    const float* lg = i ? row(i)->logits : logits_;
    const float* x = i ? row(i)->x : x_;
    if (logits)
      LILY_CUDA_CHECK(cudaMemcpyAsync(logits + size_t(i) * c.vocab, lg, size_t(c.vocab) * 4, cudaMemcpyDeviceToHost,
                                      stream_));
    if (hidden) prefill_rmsnorm_f32(x, H, final_norm_, 1, H, c.rms_eps, vhid_ + size_t(i) * H, H, stream_);
  }
  if (hidden)
    LILY_CUDA_CHECK(cudaMemcpyAsync(hidden, vhid_, size_t(n) * H * 4, cudaMemcpyDeviceToHost, stream_));
  // row i's lm_head wrote its argmax to out_ids_[i] (its cursor)
  if (ids_out) LILY_CUDA_CHECK(cudaMemcpyAsync(ids_out, out_ids_, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.pos += n;
}

void CudaBackend::wave_release() {
  for (cudaGraphExec_t& g : wave_graphs_)
    if (g) {
      cudaGraphExecDestroy(g);
      g = nullptr;
    }
  for (cudaStream_t& s : wave_streams_)
    if (s) {
      cudaStreamDestroy(s);
      s = nullptr;
    }
  for (cudaEvent_t e : wave_ev_)
    if (e) cudaEventDestroy(e);
  wave_ev_.clear();
  if (wave_ctl_host_) cudaFreeHost(wave_ctl_host_);
  wave_ctl_host_ = nullptr;
}

}  // namespace lily::cuda
