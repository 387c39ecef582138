// The speculative verify as one launch sequence for all its rows (CudaBackend::verify_batch, cuda_backend.h): the
// decode step's kernels captured once per row count n into one graph, each launch given the n rows (Rows): the
// GEMVs and the lm_head read each weight row once and dot it with every row's x, the DeltaNet step carries each
// layer's state through the rows on chip (writing the state after each row but the last to a snapshot slot, for
// accept), the MoE kernels run the rows side by side (each row on 1/n of the grid), the attention kernel runs row
// after row (row r at position P + r sees the KV rows of the rows before it). Row r's activations, scratch and
// step control sit at byte offset r * rows_stride_ from the plain step's (CudaBackend::alloc_rows). Every kernel
// computes each row with a single-row launch's sums in the same order, so the logits and states equal plain
// decoding's bit for bit.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/cuda_state.h"
#include "cuda/prefill/prefill.h"

namespace lily::cuda {

cudaGraphExec_t CudaBackend::rows_graph(int n) {
  cudaGraphExec_t& graph = rows_graphs_[n];
  if (graph) return graph;
  struct Restore {  // the launch settings of plain steps, back however the capture ends
    CudaBackend& b;
    unsigned long long *tr, *btr;
    ~Restore() {
      set_decode_grid_share(1);
      b.rows_ = {};
      b.trace_ = tr;
      b.btrace_ = btr;
    }
  } restore{*this, trace_, btrace_};
  trace_ = btrace_ = nullptr;  // the stamps belong to plain steps
  cudaGraph_t g = nullptr;
  LILY_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed));
  try {
    set_decode_int8_x(opt_.int8_x);  // as enqueue_step
    const int64_t st = rows_stride_;
    for (int r = 0; r < n; ++r)  // row r's input id at its cursor
      embed(embed_, in_ids_, row_at(ctl_, r, st), row_at(x_, r, st), stream_, false);
    rows_ = {n, st};
    for (const DLayer& d : layers_) enqueue_layer(d, stream_);
    lm_head_argmax(lm_head_, x_, final_norm_, cfg_.rms_eps, logits_, in_ids_, out_ids_, ctl_, stream_, opt_.pdl,
                   nullptr, rows_);
  } catch (...) {
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

void CudaBackend::verify_batch(CudaState& st, const int32_t* ids, int n, float* logits, float* hidden,
                               int32_t* ids_out) {
  if (n < 2 || n > kMaxRows) throw Error("cuda verify: one launch sequence takes 2 to " + std::to_string(kMaxRows) + " rows");
  const ModelConfig& c = cfg_;
  const int H = c.hidden;
  for (int i = 0; i + 1 < n; ++i) snap(size_t(i), st.s_bytes + st.conv_bytes);  // before the capture reads them
  if (snap_s_bytes_ != st.s_bytes) {  // captured with the slots' layout
    drop_rows_graphs();
    snap_s_bytes_ = st.s_bytes;
  }
  if (!rows_ctl_host_) {
    LILY_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&rows_ctl_host_), sizeof(StepCtl) * kMaxRows));
  }
  for (int i = 0; i < n; ++i) {
    StepCtl& h = rows_ctl_host_[i];
    h = StepCtl{};
    h.kv = st.kv;
    h.S = st.S;
    h.conv = st.conv;
    h.pos = st.pos + i;
    h.max_ctx = st.max_ctx;
    h.cursor = i;
    h.n_given = n;
    LILY_CUDA_CHECK(cudaMemcpyAsync(row_at(ctl_, i, rows_stride_), &h, sizeof(StepCtl), cudaMemcpyHostToDevice, stream_));
  }
  LILY_CUDA_CHECK(cudaMemcpyAsync(in_ids_, ids, size_t(n) * 4, cudaMemcpyHostToDevice, stream_));
  LILY_CUDA_CHECK(cudaGraphLaunch(rows_graph(n), stream_));
  for (int i = 0; i < n; ++i) {
    if (logits)
      LILY_CUDA_CHECK(cudaMemcpyAsync(logits + size_t(i) * c.vocab, row_at(logits_, i, rows_stride_),
                                      size_t(c.vocab) * 4, cudaMemcpyDeviceToHost, stream_));
    if (hidden)
      prefill_rmsnorm_f32(row_at(x_, i, rows_stride_), H, final_norm_, 1, H, c.rms_eps, vhid_ + size_t(i) * H, H,
                          stream_);
  }
  if (hidden)
    LILY_CUDA_CHECK(cudaMemcpyAsync(hidden, vhid_, size_t(n) * H * 4, cudaMemcpyDeviceToHost, stream_));
  // row i's lm_head wrote its argmax to out_ids_[i] (its cursor)
  if (ids_out) LILY_CUDA_CHECK(cudaMemcpyAsync(ids_out, out_ids_, size_t(n) * 4, cudaMemcpyDeviceToHost, stream_));
  LILY_CUDA_CHECK(cudaStreamSynchronize(stream_));
  st.pos += n;
}

void CudaBackend::drop_rows_graphs() {
  for (cudaGraphExec_t& g : rows_graphs_)
    if (g) {
      cudaGraphExecDestroy(g);
      g = nullptr;
    }
}

}  // namespace lily::cuda
