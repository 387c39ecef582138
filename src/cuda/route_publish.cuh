// The out projection's route block (GemvRoute in kernels.h, LILY_CUDA_ROUTE_PUB=1): one extra block of the GEMV
// launch that turns the router-from-y parts into the published routing while the GEMV's own rows still run, so the
// fused MoE kernel can request its first routed rows before its PDL wait instead of summing and ranking after it.
#pragma once
#include "cuda/moe_route.cuh"

namespace lily::cuda {

__device__ __forceinline__ unsigned ld_relaxed_u32(const void* p) {  // a poll: no L1, no ordering
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Thread e < E: element e's parts, the A parts once the PDL wait has returned, B's as this launch's side rows write
// them (each polled until it is not kPreUnset, then set back to kPreUnset for the next layer's writers); the sum in
// part order (pre_total's, so the same float as the fused kernel's own sum); warp 0 ranks the sums (route_pre) and
// publishes the ids word after the selected sums. Block of 256 threads (E <= 256).
__device__ __forceinline__ void route_publish_block(const GemvRoute& r) {
  __shared__ __align__(16) float sl[256];
  __shared__ int s_idx[moe_detail::kMaxK];
  __shared__ float s_v[moe_detail::kMaxK], s_w[moe_detail::kMaxK];
  pdl_trigger();  // the MoE kernel may land: it waits for the ids word, not for this block's exit
  pdl_wait();     // the A parts were written by kernels before this one
  const int e = threadIdx.x;
  if (e < r.E) {
    float v[kMoePreMaxParts];
#pragma unroll
    for (int i = 0; i < kMoePreMaxParts; ++i)
      v[i] = i < r.b_first && i < r.parts ? __ldcg(r.pre + i * r.ps + e * r.es) : __uint_as_float(kPreUnset);
    for (bool pending = true; pending;) {
      pending = false;
#pragma unroll
      for (int i = 0; i < kMoePreMaxParts; ++i)
        if (i >= r.b_first && i < r.parts && __float_as_uint(v[i]) == kPreUnset) {
          v[i] = __uint_as_float(ld_relaxed_u32(r.pre + i * r.ps + e * r.es));
          pending = pending || __float_as_uint(v[i]) == kPreUnset;
        }
    }
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kMoePreMaxParts; ++i)
      if (i < r.parts) s += v[i];
#pragma unroll
    for (int i = 0; i < kMoePreMaxParts; ++i)
      if (i >= r.b_first && i < r.parts) __stcg(r.pre + i * r.ps + e * r.es, __uint_as_float(kPreUnset));
    sl[e] = s;
  } else {
    sl[e] = 0.f;  // past E: no key (route_pre reads all 256)
  }
  __syncthreads();
  if (threadIdx.x >= 32) return;
  const int lane = threadIdx.x;
  moe_detail::route_pre(sl, r.E, r.k, 1.f, s_idx, s_w, false, s_v);  // route_pick: the ballot form ranks alike
  float* const vsel = reinterpret_cast<float*>(r.pub + 1);
  if (lane < r.k) {
    vsel[lane] = s_v[lane];
    __threadfence();
  }
  __syncwarp();
  if (lane == 0) {
    unsigned long long word = 0;
    for (int i = 0; i < r.k; ++i) word |= static_cast<unsigned long long>(s_idx[i]) << (8 * i);
    atomicExch(r.pub, word);
    if (r.trace) trace_at(r.trace, 0);
  }
}

}  // namespace lily::cuda
