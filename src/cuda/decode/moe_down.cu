// MoE down for decode (batch 1): one warp per hidden row sums, over the k routed experts and the shared expert,
// routing weight x (down row . act) and adds it into the residual; with early_route the routing comes from the fused
// router + gate_up kernel's flag (moe_decode.cu) and the rows are requested before the PDL wait.
#include <algorithm>
#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "cuda/decode/moe_route.cuh"
#include "cuda/decode/moe_util.cuh"

namespace lily::cuda {
namespace {

using namespace moe_detail;

// The k routing weights and the shared expert's gate into w[0..k] (threads 0..k), through L2 (.cg): written by a
// kernel that may still be running.
template <bool PRE, bool ROWS>
__device__ __forceinline__ void route_weights_down(const MoeArgs& a, float* w) {
  if (threadIdx.x < a.k) {
    w[threadIdx.x] = __ldcg(row_ptr<ROWS>(a, a.route_w) + threadIdx.x);
  } else if (threadIdx.x == a.k) {
    if constexpr (PRE) {  // shg holds the router input's RMS factor, the gate's parts are element E
      float4 q[kMoePreMaxParts / 4];
      pre_load<ROWS>(a, a.E, q);
      w[a.k] = sigmoid_f(__ldcg(row_ptr<ROWS>(a, a.shg)) * pre_total(q, a.pre_parts));
    } else {
      w[a.k] = sigmoid_f(__ldcg(row_ptr<ROWS>(a, a.shg)));
    }
  }
}

// NT threads: 256, or kDownWide where the act vector has 257..288 16-element groups (k = 8, I = Is = 512: 288), so
// that its int8 quantisation is one pass over the threads, not two.
constexpr int kDownWide = 288;
// PRE: the router-from-y form (MoeArgs::pre): the shared-expert gate from its parts times shg (the RMS factor).
// ROWS (MoeArgs::rows, n > 1): blockIdx.y is the row, its per-row pointers taken through row_ptr; everything else runs
// as in a launch for that row alone (the routing flag and its counter in the row's route_done).
template <int FMT, class X, int NT = kThreads, bool PRE = false, bool ROWS = false>
__global__ void __launch_bounds__(NT) k_moe_down(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int I = a.down.m.cols, Is = a.sh_down.cols, H = a.down.m.rows;
  const int n = a.k * I + Is;
  X xv(smem4, n);
  __shared__ float red[32];
  __shared__ float s_w[kMaxK + 1];
  __shared__ DMat s_m[kMaxK + 1];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (NT / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (NT / 32);
  constexpr int E = FmtInfo<FMT>::kElems;
  const int cpr = I / E, cprs = Is / E;  // chunks per row: routed, shared
  const bool tr = a.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(a.trace, 10);
  if (a.trace && threadIdx.x == 0) trace_max(a.trace, 13);  // the last block's entry
  unsigned long long* const dbt = a.btrace ? a.btrace + kMoeBtraceBlocks * kMoeBtraceSlots : nullptr;
  auto bt = [&](int i) { btrace_at(dbt, kMoeBtraceBlocks, kMoeBtraceSlots, i); };
  bt(0);
  __shared__ unsigned long long s_ids;
  if (a.route_packed) {  // the ids in the flag word itself: no L2 round trip between the flag and the rows
    if (threadIdx.x == 0) {
      unsigned long long v;
      while ((v = ld_acquire_u64(packed_route(row_ptr<ROWS>(a, a.route_done)))) == 0ull) __nanosleep(32);
      s_ids = v;
    }
    __syncthreads();
  } else if (a.early_route) {  // the routing is published (flag route_done[4]) by the fused kernel after its top-k
    if (threadIdx.x == 0)
      while (ld_acquire_u32(row_ptr<ROWS>(a, a.route_done) + 4) == 0u) __nanosleep(32);
    __syncthreads();
  } else {
    pdl_wait();
  }
  if (tr) trace_at(a.trace, 11);
  bt(1);
  if (a.route_packed) {  // the weights (s_w) after the wait, below
    if (threadIdx.x < a.k) s_m[threadIdx.x] = expert(a.down, int((s_ids >> (8 * threadIdx.x)) & 255u));
    else if (threadIdx.x == a.k) s_m[a.k] = a.sh_down;
  } else if (threadIdx.x < a.k) {  // through L2 (.cg): written by a kernel that may still be running
    s_m[threadIdx.x] = expert(a.down, __ldcg(row_ptr<ROWS>(a, a.route_idx) + threadIdx.x));
  } else if (threadIdx.x == a.k) {
    s_m[a.k] = a.sh_down;
  }
  if (!a.route_packed) route_weights_down<PRE, ROWS>(a, s_w);
  __syncthreads();
  // this warp's first weight loads go out before the act prologue, so their DRAM latency overlaps it
  const int nch = a.k * cpr + cprs;
  constexpr int U = 5;  // chunks per lane in flight (144 chunks per row for k=8, I=Is=512 at 4 bits)
  uint4 raw[U];
  uint32_t sb[U];
  int ee[U];
  auto issue = [&](int row, int c0) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      ee[u] = -1;
      if (c < nch) {
        int e, cc;
        if (c < a.k * cpr) { e = c / cpr; cc = c - e * cpr; } else { e = a.k; cc = c - a.k * cpr; }
        chunk_load<FMT>(s_m[e], row, cc, raw[u], sb[u]);
        ee[u] = e;
      }
    }
  };
  bt(6);
  if (warp < H) issue(warp, 0);
  pdl_trigger();  // once its first rows are requested: the next kernel's blocks request theirs after these
  bt(7);
  // early_route: the residual row this warp adds to, read now (final: written before the fused kernel's wait, which
  // returned before the routing flag was published)
  const float out0 = a.early_route && lane == 0 && warp < H ? __ldcg(row_ptr<ROWS>(a, a.out) + warp) : 0.f;
  bt(2);
  const bool tre = tr && a.early_route;  // slots 8, 9, 15 belong to the separate gate_up kernel otherwise
  if (tre) trace_at(a.trace, 9);
  if (a.early_route) {
    pdl_wait();  // act, and out's other writers
    if (threadIdx.x == 32 && atomicAdd(row_ptr<ROWS>(a, a.route_done) + 5, 1u) == gridDim.x - 1u) {
      row_ptr<ROWS>(a, a.route_done)[4] = 0;  // every block (of the row) read the flag
      *packed_route(row_ptr<ROWS>(a, a.route_done)) = 0ull;
      row_ptr<ROWS>(a, a.route_done)[5] = 0;
    }
  }
  if (tre) trace_at(a.trace, 15);
  bt(3);
  if (a.route_packed) route_weights_down<PRE, ROWS>(a, s_w);  // read by the dots, past load_x's final barrier
  load_x(row_ptr<ROWS>(a, a.act), nullptr, 0.f, n, xv, red, nullptr, {}, tr && a.trace_x ? a.trace_x + 2 : nullptr);
  pdl_trigger();
  if (tre) trace_at(a.trace, 8);
  bt(4);
  for (int row = warp; row < H; row += nwarps) {
    float acc = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 32 * U) {
      if (c0 > 0) issue(row, c0);
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ee[u] >= 0) acc += s_w[ee[u]] * xv.template dot<FMT>(raw[u], sb[u], c0 + lane + 32 * u);
    }
    if (row + nwarps < H) issue(row + nwarps, 0);  // the next row's loads before this row's reduction
    acc = warp_sum(acc);
    if (lane == 0)
      row_ptr<ROWS>(a, a.out)[row] = (a.early_route && row == warp ? out0 : row_ptr<ROWS>(a, a.out)[row]) + acc;
    if (row == warp) bt(5);
  }
  if (tr) trace_at(a.trace, 12);
  if (a.trace || a.trace_end) {  // uniform over the launch
    __syncthreads();
    if (threadIdx.x == 0) trace_max(a.trace, 14);
    if (threadIdx.x == 0) trace_max(a.trace_end, 0);
    bt(8);
  }
}

}  // namespace

void moe_down(const MoeArgs& args, cudaStream_t s, bool pdl) {
  check(args);
  check_rows(args, "moe_down");
  MoeArgs a = args;
  a.route_packed = route_packed_ok(a);
  const int n = a.k * a.down.m.cols + a.sh_down.cols;
  const int H = a.down.m.rows;
  const size_t smem = size_t(n) * 4 + size_t(n / 16) * 4;
  auto run = [&](auto kern, int nt = kThreads) {
    allow_smem(kern, smem);
    const int wpb = nt / 32;
    const int blocks = std::min((H + wpb - 1) / wpb, decode_grid(resident_grid(kern, nt, smem)));
    launch(kern, dim3(blocks, a.rows.n), dim3(nt), smem, s, pdl, a);
  };
  const int ng = n / 16;
  // pre: std::bool_constant<a.pre != null> (the PRE instantiations), rows_tag: <a.rows.n > 1> (the ROWS ones)
  auto by_fmt = [&](auto pre, auto rows_tag) {
    constexpr bool P = decltype(pre)::value, R = decltype(rows_tag)::value;
    auto q4 = [&](auto fmt) {  // the formats int8 x serves (fmt: std::integral_constant<int, kQ4, kQ4Z, kQ4H or kQ6>)
      constexpr int F = decltype(fmt)::value;
      if (use_int8_x(F, n) && ng > kThreads && ng <= kDownWide) run(k_moe_down<F, XQ, kDownWide, P, R>, kDownWide);
      else if (use_int8_x(F, n)) run(k_moe_down<F, XQ, kThreads, P, R>);
      else run(k_moe_down<F, XF, kThreads, P, R>);
    };
    switch (a.down.m.fmt) {
      case kQ4: q4(std::integral_constant<int, kQ4>{}); break;
      case kQ4Z: q4(std::integral_constant<int, kQ4Z>{}); break;
      case kQ4H: q4(std::integral_constant<int, kQ4H>{}); break;
      case kQ8: run(k_moe_down<kQ8, XF, kThreads, P, R>); break;
      case kQ8H: run(k_moe_down<kQ8H, XF, kThreads, P, R>); break;
      case kF8: run(k_moe_down<kF8, XF, kThreads, P, R>); break;
      case kI8: run(k_moe_down<kI8, XF, kThreads, P, R>); break;
      case kQ6: q4(std::integral_constant<int, kQ6>{}); break;
      case kBF16: run(k_moe_down<kBF16, XF, kThreads, P, R>); break;
      default: throw Error("moe_down: unknown weight format");
    }
  };
  auto by_pre = [&](auto rows_tag) {
    if (a.pre) by_fmt(std::true_type{}, rows_tag);
    else by_fmt(std::false_type{}, rows_tag);
  };
  if (a.rows.n > 1) by_pre(std::true_type{});
  else by_pre(std::false_type{});
}

}  // namespace lily::cuda
