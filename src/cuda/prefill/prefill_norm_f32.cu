// Row kernels of the multi-token-prediction input stage and of the hidden-state outputs (PrefillRunner::run_mtp,
// PrefillRunner::run with hidden_out): RMSNorm of f32 rows into f32 rows.
#include "core/error.h"
#include "cuda/common/cuda_check.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

// one block per row: out[t][i] = x[t][i] * rsqrt(mean(x[t]^2) + eps) * w[i]
__global__ void __launch_bounds__(256) k_rmsnorm_f32(const float* x, int ldx, const float* w, int H, float eps,
                                                    float* out, int ldo) {
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const float* xr = x + t * ldx;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / float(H) + eps);
  float* o = out + t * ldo;
  for (int i = threadIdx.x; i < H; i += blockDim.x) o[i] = xr[i] * r * w[i];
}

}  // namespace

void prefill_rmsnorm_f32(const float* x, int ldx, const float* w, int n, int H, float eps, float* out, int ldo,
                         cudaStream_t s) {
  if (n <= 0) return;
  k_rmsnorm_f32<<<n, 256, 0, s>>>(x, ldx, w, H, eps, out, ldo);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
