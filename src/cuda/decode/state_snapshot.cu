// gdn_state_snapshot (state_snapshot.h): a grid-stride float4 copy of one layer's S and conv slices.
#include <algorithm>

#include "core/error.h"
#include "cuda/common/device_util.cuh"
#include "cuda/decode/state_snapshot.h"

namespace lily::cuda {
namespace {

__global__ void k_snapshot(const StepCtl* ctl, int layer, SnapShape sh, float* dst) {
  const int64_t s_n = int64_t(sh.Hv) * sh.Dv * sh.Dk, c_n = int64_t(sh.conv_dim) * sh.K;
  const float* S = ctl->S + layer * s_n;
  const float* C = ctl->conv + layer * c_n;
  float* dS = dst + layer * s_n;
  float* dC = dst + sh.n_lin * s_n + layer * c_n;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x, t0 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t i = t0; i < s_n / 4; i += stride)
    reinterpret_cast<float4*>(dS)[i] = reinterpret_cast<const float4*>(S)[i];
  for (int64_t i = s_n / 4 * 4 + t0; i < s_n; i += stride) dS[i] = S[i];
  for (int64_t i = t0; i < c_n; i += stride) dC[i] = C[i];
}

}  // namespace

void gdn_state_snapshot(const StepCtl* ctl, int layer, const SnapShape& sh, float* dst, cudaStream_t s) {
  if (layer < 0 || layer >= sh.n_lin) throw Error("gdn_state_snapshot: layer out of range");
  const int64_t s_n = int64_t(sh.Hv) * sh.Dv * sh.Dk;
  if (s_n % 4 || reinterpret_cast<uintptr_t>(dst) % 16)
    throw Error("gdn_state_snapshot: S slices must be whole float4s and dst 16-byte aligned");
  const int threads = 256;
  const int blocks = int(std::min<int64_t>((s_n / 4 + threads - 1) / threads, 2 * device_sms()));
  launch(k_snapshot, dim3(std::max(blocks, 1)), dim3(threads), 0, s, false, ctl, layer, sh, dst);
}

}  // namespace lily::cuda
