// Router-from-y (router_y.cu): a layer's M = W_router diag(post_norm) O, made once at load.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

// m: [E + 1][N] int16 (row E: the shared-expert gate's), rscale: [E + 1]; row j of M = W_r diag(nw) O is
// rscale[j] * m[j]. router [E, H], shg [1, H], nw [H] (device), O [H, N]. Asynchronous on s; scratch (device,
// compose_router_scratch_floats(E, H, N) floats) may be reused once s has run it. a_m (optional, [E + 1][H] int16 with
// a_rscale [E + 1]): also the rows of W_r diag(nw) in the same form (A).
size_t compose_router_scratch_floats(int E, int H, int N);
void compose_router(const DMat& router, const DMat& shg, const float* nw, const DMat& O, uint16_t* m, float* rscale,
                    float* scratch, cudaStream_t s, uint16_t* a_m = nullptr, float* a_rscale = nullptr);

}  // namespace lily::cuda
