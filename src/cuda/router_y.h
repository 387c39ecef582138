// Router-from-y (router_y.cu): a layer's M = W_router diag(post_norm) O, made once at load.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/kernels.h"

namespace lily::cuda {

// m: [E + 1][N] f16 (row E: the shared-expert gate's), rscale: [E + 1]; row j of M = W_r diag(nw) O is
// rscale[j] * m[j]. router [E, H], shg [1, H], nw [H] (device), O [H, N]. Synchronises s; temporaries are freed
// before it returns.
void compose_router(const DMat& router, const DMat& shg, const float* nw, const DMat& O, uint16_t* m, float* rscale,
                    cudaStream_t s);

}  // namespace lily::cuda
