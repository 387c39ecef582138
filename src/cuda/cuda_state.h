// CudaState: the device buffers of one sequence (KV cache, DeltaNet recurrent and conv states, the MTP block's
// KV cache).
#pragma once
#include <memory>

#include "cuda/cuda_backend.h"

namespace lily::cuda {

// KV cache [n_full][2][nkv][max_ctx][hd] fp16, recurrent state [n_lin][Hv][Dv][Dk] f32, conv ring
// [n_lin][K][conv_dim] f32; with MTP weights also the MTP layer's KV cache [2][nkv][max_ctx][hd] fp16 (mtp_rows
// rows used).
class CudaState : public SeqState {
 public:
  CudaState(CudaBackend* be, const ModelConfig& c, int max_ctx, bool with_mtp);
  ~CudaState() override;
  std::unique_ptr<SeqState> clone() const override;
  void assign(const SeqState& other) override;  // cuda_mtp.cpp
  size_t bytes() const override { return kv_bytes + s_bytes + conv_bytes + mtp_kv_bytes; }
  // Copies the first `rows` positions of every (layer, K/V, head) slab of a KV cache of `nslab` slabs.
  void copy_kv_rows(uint16_t* dst, const uint16_t* src, size_t nslab, int rows) const;

  CudaBackend* be_;
  uint16_t* kv = nullptr;
  float* S = nullptr;
  float* conv = nullptr;
  size_t kv_bytes = 0, s_bytes = 0, conv_bytes = 0;
  size_t n_kv_slabs = 0;          // n_full * 2 * nkv
  uint16_t* mtp_kv = nullptr;     // null without MTP weights
  size_t mtp_kv_bytes = 0;
  int mtp_rows = 0;               // rows of the MTP KV cache in use
};

}  // namespace lily::cuda
