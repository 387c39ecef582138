// Weight loads of the decode kernels: read-only, not kept in L1, with an L2 eviction policy (sm_80+).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace lily::cuda {

__device__ __forceinline__ uint4 ldg_stream(const void* p) {  // read-only, do not keep in L1
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}
// Decode weight chunks (chunk_load: GEMVs, MoE, lm_head) are read with an L2 evict-first policy (sm_80+), so the
// ~1.9 GB per step weight stream pushes the step's small tensors and state out of L2 less (+0.7% at 4K on the H200).
// Older architectures (and the host pass) use plain loads (the values read are the same either way).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define LILY_L2_EF_LOADS 1
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
#endif
__device__ __forceinline__ uint4 ldg_weight(const void* p) {
#ifdef LILY_L2_EF_LOADS
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p), "l"(l2_evict_first_policy()));
  return r;
#else
  return ldg_stream(p);
#endif
}
__device__ __forceinline__ uint32_t ldg_weight_u32(const uint32_t* p) {
#ifdef LILY_L2_EF_LOADS
  uint32_t r;
  asm volatile("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "l"(l2_evict_first_policy()));
  return r;
#else
  return __ldg(p);
#endif
}

}  // namespace lily::cuda
