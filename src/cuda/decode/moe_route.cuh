// Routing of the MoE decode kernels (moe_decode.cu): the top-k of the router logits by one warp (route_warp from
// global logits, route_pre from the router-from-y form's parts summed in shared memory) and the softmax over the
// selected; PreLogits loads and sums those parts (MoeArgs::pre).
#pragma once
#include "cuda/decode/moe_util.cuh"

namespace lily::cuda::moe_detail {

// The same top-k by one warp straight from global logits[E] (L2): each lane holds E/32 keys, k rounds of a warp
// argmax (ties -> lower index), then the softmax over the k selected by lanes 0..k-1. Results in idx[k], w[k]
// (shared); the caller syncs the block before reading them. Used where every block routes for itself.
// Each round is two single-instruction warp reductions (redux.sync, sm_80+) on 32-bit keys: the largest ordered
// logit, then the lowest index holding it (a 64-bit shuffle argmax took ~3.3 us for the 8 rounds).
// kPer: logits per lane (E <= 32 * kPer); the fused kernel takes 8 for E <= 256 (half the compares of kMaxE / 32).
// The softmax over the k selected logits v of lanes 0..k-1 (lane 0 holds the largest), of scale * logit (warp 0):
// lane l < k's weight is the returned exponential / sum.
__device__ __forceinline__ float selected_exp(float v, int k, float scale, float& sum) {
  const int lane = threadIdx.x & 31;
  const float top = __shfl_sync(0xffffffffu, v, 0);
  const float ex = lane < k ? __expf(scale * (v - top)) : 0.f;
  sum = warp_sum(ex);
  return ex;
}

// k rounds of the warp argmax over the keys (key i of a lane is logit elem(i): lane * kPer + i when vec, else
// lane + 32 i), then the softmax over the k selected, of scale * logit (scale > 0: the router input's RMS factor where
// the keys are of logits not yet scaled by it; it does not change the selection). Results as route_warp's.
// vsel (optional): the k selected logits themselves instead of the weights (route_weights makes them later).
template <int kPer>
__device__ __forceinline__ void route_pick(uint32_t (&key)[kPer], bool vec, int k, int* idx, float* w,
                                           float scale = 1.f, float* vsel = nullptr) {
  const int lane = threadIdx.x & 31;
  auto elem = [&](int i) { return vec ? lane * kPer + i : lane + 32 * i; };
  int my_e = 0;
  uint32_t my_key = 0u;
  for (int j = 0; j < k; ++j) {
    uint32_t m = 0u;
#pragma unroll
    for (int i = 0; i < kPer; ++i) m = key[i] > m ? key[i] : m;
    const uint32_t top = __reduce_max_sync(0xffffffffu, m);
    uint32_t cand = 0xffffffffu;  // this lane's lowest index holding the maximum
#pragma unroll
    for (int i = kPer - 1; i >= 0; --i)
      if (key[i] == top) cand = uint32_t(elem(i));
    const uint32_t e = __reduce_min_sync(0xffffffffu, cand);  // ties -> lower index
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (uint32_t(elem(i)) == e) key[i] = 0u;
    if (lane == j) {
      my_e = int(e);
      my_key = top;
    }
  }
  // the selected logit back from its key (the inverse of route_key's monotone map: no second load)
  const uint32_t bits = (my_key & 0x80000000u) ? (my_key & 0x7fffffffu) : ~my_key;
  const float v = lane < k ? __uint_as_float(bits) : 0.f;
  if (vsel) {
    if (lane < k) {
      idx[lane] = my_e;
      vsel[lane] = v;
    }
    return;
  }
  float sum;
  const float ex = selected_exp(v, k, scale, sum);
  if (lane < k) {
    idx[lane] = my_e;
    w[lane] = ex / sum;
  }
}

template <int kPer>
__device__ void route_warp(const float* logits, int E, int k, int* idx, float* w) {
  const int lane = threadIdx.x & 31;
  // element of key i: lane + 32 i, or lane * kPer + i where all 32 * kPer logits are loaded as 16-byte vectors
  // (kPer / 4 vector loads per lane where aligned, instead of kPer)
  const bool vec = kPer % 4 == 0 && E == 32 * kPer && (reinterpret_cast<uintptr_t>(logits) & 15) == 0;
  uint32_t key[kPer];  // its ordered logit bits (route_key's high word); 0 = taken / none
  if (vec) {
#pragma unroll
    for (int j = 0; j < kPer / 4; ++j) {
      const float4 l4 = __ldcg(reinterpret_cast<const float4*>(logits) + lane * (kPer / 4) + j);
      key[4 * j] = uint32_t(route_key(l4.x, 0) >> 32);
      key[4 * j + 1] = uint32_t(route_key(l4.y, 0) >> 32);
      key[4 * j + 2] = uint32_t(route_key(l4.z, 0) >> 32);
      key[4 * j + 3] = uint32_t(route_key(l4.w, 0) >> 32);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = lane + 32 * i;
      key[i] = e < E ? uint32_t(route_key(__ldcg(logits + e), e) >> 32) : 0u;
    }
  }
  route_pick<kPer>(key, vec, k, idx, w);
}

// Router logits given before the kernel as partial sums (MoeArgs::pre, the router-from-y form): thread t < E holds
// element t's parts, all loads issued by load() right after the PDL wait, summed in part order (deterministic) by
// sum() after the x prologue. The shared-expert gate (element E) is summed by MoE down (pre_total).
__device__ __forceinline__ float pre_total(const float4 (&q)[kMoePreMaxParts / 4], int parts) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < kMoePreMaxParts / 4; ++i) {
    const float e[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      if (4 * i + j < parts) s += e[j];
  }
  return s;
}
// element e's parts (all loads in flight at once; ROWS: of row blockIdx.y's pre)
// (element-major: pre_parts / 4 16-byte loads; part-major: one float per part, the block's threads reading each part
// as one contiguous row)
template <bool ROWS>
__device__ __forceinline__ void pre_load(const MoeArgs& a, int e, float4 (&q)[kMoePreMaxParts / 4]) {
  if (a.pre_ps > 1) {
    float v[kMoePreMaxParts];
#pragma unroll
    for (int i = 0; i < kMoePreMaxParts; ++i)
      v[i] = i < a.pre_parts ? __ldcg(row_ptr<ROWS>(a, a.pre) + i * a.pre_ps + e) : 0.f;
#pragma unroll
    for (int i = 0; i < kMoePreMaxParts / 4; ++i)
      q[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
    return;
  }
  const int nv = (a.pre_parts + 3) / 4;
  const float4* src = reinterpret_cast<const float4*>(row_ptr<ROWS>(a, a.pre) + int64_t(e) * a.pre_es);
#pragma unroll
  for (int i = 0; i < kMoePreMaxParts / 4; ++i) q[i] = i < nv ? __ldcg(src + i) : make_float4(0.f, 0.f, 0.f, 0.f);
}
struct PreLogits {
  float4 t[kMoePreMaxParts / 4];
  template <bool ROWS>
  __device__ __forceinline__ void load(const MoeArgs& a) {
    if (int(threadIdx.x) < a.E) pre_load<ROWS>(a, threadIdx.x, t);
  }
  // element t's sum into sl[t] (the caller syncs the block before the top-k reads it)
  __device__ __forceinline__ void sum(const MoeArgs& a, float* sl) const {
    if (int(threadIdx.x) < a.E) sl[threadIdx.x] = pre_total(t, a.pre_parts);
  }
};

// The weights of route_pick's k selected logits vsel (largest first) as it computes them, of scale * logit (warp 0).
__device__ __forceinline__ void route_weights(const float* vsel, int k, float scale, float* w) {
  const int lane = threadIdx.x & 31;
  float sum;
  const float ex = selected_exp(lane < k ? vsel[lane] : 0.f, k, scale, sum);
  if (lane < k) w[lane] = ex / sum;
}

// The top-k of the E summed logits in sl (shared; keys of elements >= E: none) by warp 0, weights of r * logit
// (vsel given: the selected logits instead, for route_weights).
__device__ __forceinline__ void route_pre(const float* sl, int E, int k, float r, int* idx, float* w,
                                          float* vsel = nullptr) {
  const int lane = threadIdx.x & 31;
  uint32_t key[8];
  const float4 a = reinterpret_cast<const float4*>(sl)[2 * lane], b = reinterpret_cast<const float4*>(sl)[2 * lane + 1];
  const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int i = 0; i < 8; ++i) key[i] = lane * 8 + i < E ? uint32_t(route_key(v[i], 0) >> 32) : 0u;
  route_pick<8>(key, true, k, idx, w, r, vsel);
}

}  // namespace lily::cuda::moe_detail
