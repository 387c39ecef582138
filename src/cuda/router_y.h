// Router-from-y (router_y.cu): a layer's M = W_router diag(post_norm) O, made once at load.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/kernels.h"

namespace lily::cuda {

// m: [E + 1][N] f16 (row E: the shared-expert gate's), rscale: [E + 1]; row j of M = W_r diag(nw) O is
// rscale[j] * m[j]. router [E, H], shg [1, H], nw [H] (device), O [H, N]. Asynchronous on s; scratch (device,
// compose_router_scratch_floats(E, H, N) floats) may be reused once s has run it.
size_t compose_router_scratch_floats(int E, int H, int N);
void compose_router(const DMat& router, const DMat& shg, const float* nw, const DMat& O, uint16_t* m, float* rscale,
                    float* scratch, cudaStream_t s);

// The [E + 1] rows of W_r diag(nw) (router then shared gate) as f16 rows m [E + 1][H] times rscale [E + 1]
// (LILY_CUDA_RY_A=f16); scratch as compose_router's.
void router_rows_f16(const DMat& router, const DMat& shg, const float* nw, uint16_t* m, float* rscale, float* scratch,
                     cudaStream_t s);

}  // namespace lily::cuda
