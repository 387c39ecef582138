// Device helpers shared by the MoE decode kernels (moe_decode.cu: the fused router + gate_up; moe_down.cu: down;
// moe_unfused.cu: router and gate_up as two launches).
#pragma once
#include "cuda/common/device_util.cuh"

namespace lily::cuda::moe_detail {

constexpr int kThreads = 256;
constexpr int kMaxE = 512, kMaxK = 16;

// Order key of logit v of expert e: monotone in v, then the lower index first (u64; the high word alone orders the
// values).
__device__ __forceinline__ unsigned long long route_key(float v, int e) {
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotone float -> uint
  return (static_cast<unsigned long long>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(e));
}

__device__ __forceinline__ unsigned long long ld_acquire_u64(const unsigned long long* p) {  // gpu-scope acquire
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// The routing as one word (MoeArgs::route_packed): route_done[6..7].
__device__ __forceinline__ unsigned long long* packed_route(unsigned int* route_done) {
  return reinterpret_cast<unsigned long long*>(route_done + 6);
}

__device__ __forceinline__ DMat expert(const DStack& st, int e) {
  DMat m = st.m;
  m.w += e * st.w_stride;
  m.sb += e * st.sb_stride;
  return m;
}

// One of MoeArgs' per-row pointers (x, logits, shg, route_done, act, route_idx, route_w, out, pre) as the kernels
// use it: in a rows launch (ROWS: MoeArgs::rows, n > 1) row blockIdx.y's copy (row_at), so that row's blocks run as
// those of a launch for that row alone (its flags and counters in its own route_done); the pointer itself otherwise.
// Taken at each use rather than from a per-row copy of the arguments: the kernels select among MoeArgs' members at run
// time (a router row's DMat), which would put such a copy in local memory; and the plain instantiations keep their
// code as it was.
template <bool ROWS, class T>
__device__ __forceinline__ T* row_ptr(const MoeArgs& a, T* p) {
  if constexpr (ROWS) return row_at(p, int(blockIdx.y), a.rows.stride);
  else return p;
}

constexpr int kRouterThreads = 128;
constexpr int kRouterChunks = 4;  // 16-byte chunks per lane held at once: a 2048-col 8-bit row

// One router row (the first kRouterChunks chunks per lane already in raw/sb, loaded before the PDL wait) dotted with
// x in f32 form; lane 0 writes the logit (or the shared-expert gate for row E).
template <int FMT, bool ROWS>
__device__ __forceinline__ void router_row(const MoeArgs& a, const DMat& m, int mrow, bool sh, int row,
                                           const uint4 (&raw)[kRouterChunks], const uint32_t (&sb)[kRouterChunks],
                                           const XF& x, int lane) {
  const int nch = m.cols / FmtInfo<FMT>::kElems;
  float v = 0.f;
#pragma unroll
  for (int u = 0; u < kRouterChunks; ++u) {
    const int c = lane + 32 * u;
    if (c < nch) v += x.template dot<FMT>(raw[u], sb[u], c);
  }
  for (int c = lane + 32 * kRouterChunks; c < nch; c += 32) {  // longer rows
    uint4 rw;
    uint32_t sbw;
    chunk_load<FMT>(m, mrow, c, rw, sbw);
    v += x.template dot<FMT>(rw, sbw, c);
  }
  v = warp_sum(v);
  if (lane == 0) {
    if (sh) row_ptr<ROWS>(a, a.shg)[0] = v;
    else row_ptr<ROWS>(a, a.logits)[row] = v;
  }
}

// The gate and up matrices of act row `row` (the k routed experts' rows, then the shared expert's) and its row in them.
__device__ __forceinline__ void act_row_mats(const MoeArgs& a, const int* s_idx, int row, DMat& g, DMat& u, int& r) {
  const int I = a.gate.m.rows;
  if (row < a.k * I) {
    const int e = s_idx[row / I];
    r = row % I;
    g = expert(a.gate, e);
    u = expert(a.up, e);
  } else {
    r = row - a.k * I;
    g = a.sh_gate;
    u = a.sh_up;
  }
}

// Row `row` of the act layout [k*I routed (expert s_idx[row / I]) | Is shared]: act[row] = silu(gate . x) * (up . x).
template <int FMT, bool ROWS, class X>
__device__ __forceinline__ void gate_up_row(const MoeArgs& a, const int* s_idx, int row, const X& x, int lane) {
  DMat g, u;
  int r;
  act_row_mats(a, s_idx, row, g, u, r);
  float gv, uv;
  row_dot2_lane<FMT>(g, r, u, r, x, lane, gv, uv);
  gv = warp_sum(gv);
  uv = warp_sum(uv);
  if (lane == 0) row_ptr<ROWS>(a, a.act)[row] = silu_f(gv) * uv;
}

// The routing as the flag's own word where it fits (else MoE down reads it through L2 after the flag).
inline bool route_packed_ok(const MoeArgs& a) {
  return a.early_route && a.k >= 2 && a.k <= 8 && a.E <= 256;
}

// The checks every MoE launcher makes of MoeArgs::rows: 1..kMaxRows rows; with several, no traces (their stamps are
// per launch, not per row) and a nonzero 16-byte multiple stride (the rows' pre and x keep their 16-byte loads).
inline void check_rows(const MoeArgs& a, const char* who) {
  if (a.rows.n < 1 || a.rows.n > kMaxRows)
    throw Error(std::string(who) + ": rows.n must be 1.." + std::to_string(kMaxRows) + ", got " +
                std::to_string(a.rows.n));
  if (a.rows.n == 1) return;
  if (a.trace || a.trace_x || a.trace_end || a.btrace)
    throw Error(std::string(who) + ": a launch of several rows takes no trace / trace_x / trace_end / btrace");
  if (a.rows.stride == 0 || a.rows.stride % 16)
    throw Error(std::string(who) + ": the rows' stride must be a nonzero multiple of 16 bytes");
}

// The checks every MoE launcher makes of the weights' formats and sizes.
inline void check(const MoeArgs& a) {
  // gate_up reads gate, up and the shared gate/up in one format, down the routed and shared down rows in one
  // (possibly another: GGUF Q4_K_M files keep some layers' down projections in Q6_K, int8 codes on the device)
  const int f = a.gate.m.fmt, fd = a.down.m.fmt;
  if (a.up.m.fmt != f || a.sh_gate.fmt != f || a.sh_up.fmt != f || a.sh_down.fmt != fd)
    throw Error("moe: gate, up and the shared expert's gate and up must share one weight format, and the routed "
                "and shared down projections one");
  if (a.E > kMaxE || a.k > kMaxK || a.k < 1) throw Error("moe: unsupported expert count / top-k");
  const int ed = fmt_chunk_elems(fd);
  if (a.down.m.cols % 32 || a.sh_down.cols % 32 || a.gate.m.cols % 32 || a.down.m.cols % ed)
    throw Error("moe: sizes must be multiples of 32");
}

// The barrier of the fused kernel, which only the router's blocks must arrive at, in two halves so a block can work between them: arrivals ctr[0] (the router blocks, after their logits), then
// every block waits for n_arrive of them; ctr[1] counts the blocks past the wait and the last resets both (the next
// launch counts only after this one completed). Blocks that are not the router's no longer hold the release back (a
// block scheduled late, say).
__device__ __forceinline__ void router_arrive(unsigned int* ctr, bool arrive) {
  __syncthreads();
  if (threadIdx.x == 0 && arrive) {
    __threadfence();
    atomicAdd(ctr, 1u);
  }
}
__device__ __forceinline__ void router_wait(unsigned int* ctr, unsigned int n_arrive) {
  if (threadIdx.x == 0)
    while (ld_acquire_u32(ctr) < n_arrive) __nanosleep(32);
  __syncthreads();
  if (threadIdx.x == 32) count_past(ctr, ctr + 1, gridDim.x);  // warp 1: not the top-k's warp 0
}

}  // namespace lily::cuda::moe_detail
