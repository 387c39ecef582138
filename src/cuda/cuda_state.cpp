// CudaState (cuda_state.h): allocation, clone, assign.
// The zeroing and copies below run on the legacy default stream, which the backend's non-blocking stream does not
// wait for (and a device-to-device cudaMemcpy / cudaMemset returns before it is done): each function ends with a
// device synchronisation, so that a forward enqueued next never reads a state still being written, and a timed
// forward does not pay for the copy.
#include "cuda/cuda_state.h"

#include <algorithm>

#include "core/error.h"
#include "cuda/common/cuda_check.h"

namespace lily::cuda {

CudaState::CudaState(CudaBackend* be, const ModelConfig& c, int max_ctx, bool with_mtp) : be_(be) {
  this->max_ctx = max_ctx;
  int n_full = 0;
  for (bool f : c.is_full) n_full += f ? 1 : 0;
  const int n_lin = c.n_layers - n_full;
  n_kv_slabs = size_t(n_full) * 2 * c.n_kv_heads;
  kv_bytes = n_kv_slabs * size_t(max_ctx) * c.head_dim * 2;
  s_bytes = size_t(n_lin) * c.lin_v_heads * c.lin_v_dim * size_t(c.lin_k_dim) * 4;
  conv_bytes = size_t(n_lin) * c.conv_kernel * size_t(c.conv_dim()) * 4;
  kv = static_cast<uint16_t*>(be->dev_alloc(std::max<size_t>(kv_bytes, 16)));
  S = static_cast<float*>(be->dev_alloc(std::max<size_t>(s_bytes, 16)));
  conv = static_cast<float*>(be->dev_alloc(std::max<size_t>(conv_bytes, 16)));
  LILY_CUDA_CHECK(cudaMemset(S, 0, s_bytes));
  LILY_CUDA_CHECK(cudaMemset(conv, 0, conv_bytes));
  if (with_mtp) {
    mtp_kv_bytes = size_t(2) * c.n_kv_heads * size_t(max_ctx) * c.head_dim * 2;
    mtp_kv = static_cast<uint16_t*>(be->dev_alloc(std::max<size_t>(mtp_kv_bytes, 16)));
  }
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaState::~CudaState() {
  be_->dev_free(kv);
  be_->dev_free(S);
  be_->dev_free(conv);
  if (mtp_kv) be_->dev_free(mtp_kv);
}

void CudaState::copy_kv_rows(uint16_t* dst, const uint16_t* src, size_t nslab, int rows) const {
  if (rows <= 0 || nslab == 0) return;
  const ModelConfig& cf = be_->config();
  const size_t slab = size_t(max_ctx) * cf.head_dim * 2, used = size_t(rows) * cf.head_dim * 2;
  LILY_CUDA_CHECK(cudaMemcpy2D(dst, slab, src, slab, used, nslab, cudaMemcpyDeviceToDevice));
}

std::unique_ptr<SeqState> CudaState::clone() const {
  auto c = std::make_unique<CudaState>(be_, be_->config(), max_ctx, mtp_kv != nullptr);
  c->pos = pos;
  c->mtp_rows = mtp_rows;
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
  LILY_CUDA_CHECK(cudaMemcpy(c->S, S, s_bytes, cudaMemcpyDeviceToDevice));
  LILY_CUDA_CHECK(cudaMemcpy(c->conv, conv, conv_bytes, cudaMemcpyDeviceToDevice));
  // the KV caches are [slab][ctx][hd]: copy every (layer, K/V, head) slab's prefix
  copy_kv_rows(c->kv, kv, n_kv_slabs, pos);
  if (mtp_kv) copy_kv_rows(c->mtp_kv, mtp_kv, size_t(2) * be_->config().n_kv_heads, mtp_rows);
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
  return c;
}

void CudaState::assign(const SeqState& other) {
  const auto* o = dynamic_cast<const CudaState*>(&other);
  if (!o || o->be_ != be_) throw Error("cuda: cannot assign a state made by another backend");
  if (o == this) return;
  if (o->max_ctx != max_ctx || (o->mtp_kv == nullptr) != (mtp_kv == nullptr))
    throw Error("cuda: cannot assign a state of another capacity (" + std::to_string(o->max_ctx) + " vs " +
                std::to_string(max_ctx) + " tokens)");
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
  LILY_CUDA_CHECK(cudaMemcpy(S, o->S, s_bytes, cudaMemcpyDeviceToDevice));
  LILY_CUDA_CHECK(cudaMemcpy(conv, o->conv, conv_bytes, cudaMemcpyDeviceToDevice));
  copy_kv_rows(kv, o->kv, n_kv_slabs, o->pos);
  if (mtp_kv) copy_kv_rows(mtp_kv, o->mtp_kv, size_t(2) * be_->config().n_kv_heads, o->mtp_rows);
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
  pos = o->pos;
  mtp_rows = o->mtp_rows;
}

}  // namespace lily::cuda
