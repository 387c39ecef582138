// MoE decode, router and gate_up as two launches (the reference of the fused form in moe_decode.cu, and the form
// where the router reads another input than the experts):
//  k_moe_router: router logits[E] and the shared-expert gate logit (one warp per row, all of a row's loads in
//    flight at once); the last block to finish does the top-k routing once (one parallel rank pass over the block)
//    and writes route_idx/route_w. (Measured: the same top-k redone in every gate_up block cost 9 us per layer.)
//  k_moe_gate_up: reads the routing, normalises x (post-attention RMSNorm), then one warp per intermediate row
//    computes gate and up of a selected expert (or the shared one) and writes silu(g)*u.
// ROWS (MoeArgs::rows, n > 1): blockIdx.y is the row, its per-row pointers taken through row_ptr; everything else runs
// as in a launch for that row alone (the router's block counter in the row's route_done).
#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "cuda/decode/moe_util.cuh"

namespace lily::cuda {
namespace {

using namespace moe_detail;

// The largest of the warp's keys (0 when all are taken), removed from its lane's set (keys are unique: index in
// the low bits).
template <int N>
__device__ __forceinline__ unsigned long long warp_take_max(unsigned long long (&key)[N]) {
  unsigned long long b = 0ull;
#pragma unroll
  for (int i = 0; i < N; ++i) b = key[i] > b ? key[i] : b;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long ob = __shfl_xor_sync(0xffffffffu, b, o);
    b = ob > b ? ob : b;
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (key[i] == b) key[i] = 0ull;
  return b;
}

// Top-k over the logits sl[E] (shared, 16-byte aligned, visible to the block) by the whole block. A threshold first:
// each of the nw warps takes the r = ceil(k/nw) largest of its slice (u64 keys: ordered value, then lower index);
// the smallest of those nw*r >= k distinct values is <= the k-th largest, so only logits >= it can be selected, and
// only those few get their exact rank against all E (ties -> lower index first), each counted by a whole warp;
// rank < k lands in slot rank. (One thread per logit counting all E serially took ~5 us in the graph.) Weights =
// softmax over the selected logits (= softmax-then-renormalise); results in idx[k], w[k] (shared), visible to the block on return.
__device__ void route_block(const float* sl, int E, int k, int* idx, float* w, float* wmin) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int per = (E + nw - 1) / nw, r = (k + nw - 1) / nw;
  constexpr int kPer = kMaxE / 32;  // slice values per lane (a warp's slice <= kMaxE)
  unsigned long long key[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int j = lane + 32 * i, e = warp * per + j;
    key[i] = (j < per && e < E) ? route_key(sl[e], e) : 0ull;
  }
  unsigned long long best = ~0ull;
  for (int round = 0; round < r; ++round) {
    const unsigned long long b = warp_take_max(key);
    if (b != 0ull) best = b;  // the warp's r-th largest so far (0: slice exhausted)
  }
  if (lane == 0) reinterpret_cast<unsigned long long*>(wmin)[warp] = best;
  __syncthreads();
  unsigned long long t = ~0ull;
  int covered = 0;  // logits known to be >= t: each warp's min(r, slice size) largest
  for (int i = 0; i < nw; ++i) {
    const unsigned long long v = reinterpret_cast<const unsigned long long*>(wmin)[i];
    t = v < t ? v : t;
    covered += min(r, max(0, min(per, E - i * per)));
  }
  if (covered < k) t = 0ull;  // tiny E: rank everything
  // candidates: each warp walks its slice; every candidate's rank is counted by the whole warp (E/32 compares per
  // lane + a warp sum), not serially by one thread
  for (int i = 0; i * 32 < per; ++i) {
    const int j = lane + 32 * i, e = warp * per + j;
    const bool valid = j < per && e < E;
    const float v = valid ? sl[e] : 0.f;
    unsigned mask = __ballot_sync(0xffffffffu, valid && route_key(v, e) >= t);
    while (mask) {
      const int src = __ffs(mask) - 1;
      mask &= mask - 1;
      const float cv = __shfl_sync(0xffffffffu, v, src);
      const int ce = __shfl_sync(0xffffffffu, e, src);
      int cnt = 0;
      for (int q = lane; q < E; q += 32) {
        const float o = sl[q];
        cnt += o > cv || (o == cv && q < ce);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
      if (lane == 0 && cnt < k) {
        idx[cnt] = ce;
        w[cnt] = cv;
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float top = w[0];
    float sum = 0.f;
    for (int j = 0; j < k; ++j) {
      w[j] = __expf(w[j] - top);
      sum += w[j];
    }
    for (int j = 0; j < k; ++j) w[j] /= sum;
  }
  __syncthreads();
}

template <int FMT, bool ROWS>
__global__ void __launch_bounds__(kRouterThreads) k_moe_router(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int H = a.router.cols;
  float* xs = reinterpret_cast<float*>(smem4);
  float* nws = xs + H;  // norm_w staged here before pdl_wait
  float* xsum16 = nws + H;
  __shared__ float red[32];
  __shared__ int s_idx[kMaxK];
  __shared__ float s_w[kMaxK];
  __shared__ __align__(16) float s_logits[kMaxE];
  __shared__ __align__(8) float s_wmin[2 * (kRouterThreads / 32)];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (kRouterThreads / 32) + (threadIdx.x >> 5);
  const int rows = a.E + 1;  // the shared-expert gate is row E
  // The router rows and norm_w do not depend on the previous kernel: their loads are issued before pdl_wait.
  const bool sh = row == a.E;
  const DMat& m = sh ? a.shg_w : a.router;
  const int mrow = sh ? 0 : row;
  const int nch = H / FmtInfo<FMT>::kElems;
  const bool tr = a.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(a.trace, 0);
  // the whole row (<= kRouterChunks chunks per lane) in registers before the wait: one DRAM round trip
  uint4 raw[kRouterChunks];
  uint32_t sb[kRouterChunks];
#pragma unroll
  for (int u = 0; u < kRouterChunks; ++u) {
    const int c = lane + 32 * u;
    if (row < rows && c < nch) chunk_load<FMT>(m, mrow, c, raw[u], sb[u]);
  }
  const float* nw = stage_vec(a.norm_w, H, nws);
  pdl_wait();
  if (tr) trace_at(a.trace, 1);
  load_x(row_ptr<ROWS>(a, a.x), nw, a.eps, H, xs, xsum16, red);
  pdl_trigger();
  if (tr) trace_at(a.trace, 2);
  if (row < rows) router_row<FMT, ROWS>(a, m, mrow, sh, row, raw, sb, XF(xs, xsum16), lane);
  if (tr) trace_at(a.trace, 3);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(row_ptr<ROWS>(a, a.route_done), 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;  // uniform over the block
  __threadfence();
  if (a.trace && threadIdx.x == 0) trace_at(a.trace, 4);
  for (int e = threadIdx.x; e < a.E; e += blockDim.x)  // other blocks' rows
    s_logits[e] = __ldcg(row_ptr<ROWS>(a, a.logits) + e);
  __syncthreads();
  route_block(s_logits, a.E, a.k, s_idx, s_w, s_wmin);
  if (threadIdx.x < a.k) {
    row_ptr<ROWS>(a, a.route_idx)[threadIdx.x] = s_idx[threadIdx.x];
    row_ptr<ROWS>(a, a.route_w)[threadIdx.x] = s_w[threadIdx.x];
  }
  if (threadIdx.x == 0) *row_ptr<ROWS>(a, a.route_done) = 0;
  if (a.trace && threadIdx.x == 0) trace_at(a.trace, 5);
}

template <int FMT, class X, bool ROWS>
__global__ void __launch_bounds__(kThreads, 2) k_moe_gate_up(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int H = a.gate.m.cols, I = a.gate.m.rows, Is = a.sh_gate.rows;
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv(nws + H, H);
  __shared__ float red[32];
  __shared__ int s_idx[kMaxK];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);
  const int rows = a.k * I + Is;

  const bool tr = a.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(a.trace, 6);
  const float* nw = stage_vec(a.norm_w, H, nws);
  pdl_wait();
  if (tr) trace_at(a.trace, 7);
  if (threadIdx.x < a.k) s_idx[threadIdx.x] = row_ptr<ROWS>(a, a.route_idx)[threadIdx.x];
  load_x(row_ptr<ROWS>(a, a.x), nw, a.eps, H, xv, red);  // ends with __syncthreads (s_idx visible)
  pdl_trigger();
  if (tr) trace_at(a.trace, 8);
  for (int row = warp; row < rows; row += nwarps) gate_up_row<FMT, ROWS>(a, s_idx, row, xv, lane);
  if (tr) trace_at(a.trace, 9);
}

}  // namespace

void moe_router(const MoeArgs& a, cudaStream_t s, bool pdl) {
  check_rows(a, "moe_router");
  if (a.E > kMaxE || a.k > kMaxK || a.k < 1) throw Error("moe: unsupported expert count / top-k");
  if (a.router.fmt != a.shg_w.fmt || a.router.cols != a.shg_w.cols || a.router.rows != a.E || a.shg_w.rows != 1)
    throw Error("moe_router: router and shared gate must share format and cols");
  const int blocks = (a.E + 1 + kRouterThreads / 32 - 1) / (kRouterThreads / 32);
  const size_t smem = size_t(a.router.cols) * 8 + size_t(a.router.cols / 16) * 4;
  auto run = [&](auto kern) {
    allow_smem(kern, smem);
    launch(kern, dim3(blocks, a.rows.n), dim3(kRouterThreads), smem, s, pdl, a);
  };
  auto by_fmt = [&](auto rows_tag) {  // std::bool_constant<a.rows.n > 1> (the ROWS instantiations)
    constexpr bool R = decltype(rows_tag)::value;
    switch (a.router.fmt) {
      case kQ4: run(k_moe_router<kQ4, R>); break;
      case kQ4Z: run(k_moe_router<kQ4Z, R>); break;
      case kQ4H: run(k_moe_router<kQ4H, R>); break;
      case kQ8: run(k_moe_router<kQ8, R>); break;
      case kQ8H: run(k_moe_router<kQ8H, R>); break;
      case kF8: run(k_moe_router<kF8, R>); break;
      case kI8: run(k_moe_router<kI8, R>); break;
      case kQ6: run(k_moe_router<kQ6, R>); break;
      case kBF16: run(k_moe_router<kBF16, R>); break;
      default: throw Error("moe_router: unknown weight format");
    }
  };
  if (a.rows.n > 1) by_fmt(std::true_type{});
  else by_fmt(std::false_type{});
}

void moe_gate_up(const MoeArgs& a, cudaStream_t s, bool pdl) {
  check(a);
  check_rows(a, "moe_gate_up");
  const int rows = a.k * a.gate.m.rows + a.sh_gate.rows;
  const size_t smem = size_t(a.gate.m.cols) * 8 + size_t(a.gate.m.cols / 16) * 4;
  auto run = [&](auto kern) {
    allow_smem(kern, smem);
    // one wave (528 blocks were two waves of 264 at 2 blocks per SM: +3 us per layer)
    const int blocks = std::min((rows + 7) / 8, decode_grid(resident_grid(kern, kThreads, smem)));
    launch(kern, dim3(blocks, a.rows.n), dim3(kThreads), smem, s, pdl, a);
  };
  auto by_fmt = [&](auto rows_tag) {  // std::bool_constant<a.rows.n > 1> (the ROWS instantiations)
    constexpr bool R = decltype(rows_tag)::value;
    switch (a.gate.m.fmt) {
      case kQ4:
        if (use_int8_x(kQ4, a.gate.m.cols)) run(k_moe_gate_up<kQ4, XQ, R>);
        else run(k_moe_gate_up<kQ4, XF, R>);
        break;
      case kQ4Z:
        if (use_int8_x(kQ4Z, a.gate.m.cols)) run(k_moe_gate_up<kQ4Z, XQ, R>);
        else run(k_moe_gate_up<kQ4Z, XF, R>);
        break;
      case kQ4H:
        if (use_int8_x(kQ4H, a.gate.m.cols)) run(k_moe_gate_up<kQ4H, XQ, R>);
        else run(k_moe_gate_up<kQ4H, XF, R>);
        break;
      case kQ8: run(k_moe_gate_up<kQ8, XF, R>); break;
      case kQ8H: run(k_moe_gate_up<kQ8H, XF, R>); break;
      case kF8: run(k_moe_gate_up<kF8, XF, R>); break;
      case kI8: run(k_moe_gate_up<kI8, XF, R>); break;
      case kQ6: run(k_moe_gate_up<kQ6, XF, R>); break;
      case kBF16: run(k_moe_gate_up<kBF16, XF, R>); break;
      default: throw Error("moe_gate_up: unknown weight format");
    }
  };
  if (a.rows.n > 1) by_fmt(std::true_type{});
  else by_fmt(std::false_type{});
}

}  // namespace lily::cuda
