// A copy of one DeltaNet layer's decode state (recurrent S and conv ring) into a snapshot laid out as
// [S of every linear layer | conv of every linear layer] (CudaState's s_bytes | conv_bytes): the speculative
// verify's per-row states, taken layer by layer while the next row's earlier layers run (state_snapshot.cu).
#pragma once
#include <cuda_runtime_api.h>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

struct SnapShape {
  int n_lin = 0;              // linear layers (slots of S and conv)
  int Hv = 0, Dv = 0, Dk = 0; // S: [n_lin][Hv][Dv][Dk] f32
  int conv_dim = 0, K = 0;    // conv: [n_lin][conv_dim][K] f32
};
// dst[layer's S slice] = ctl->S[layer], dst[n_lin S slices + layer's conv slice] = ctl->conv[layer]; the source
// pointers are read from ctl when the kernel runs (a captured graph serves every sequence). Asynchronous on s.
void gdn_state_snapshot(const StepCtl* ctl, int layer, const SnapShape& sh, float* dst, cudaStream_t s);

}  // namespace lily::cuda
