// MoE decode kernels (batch 1), the default path:
//  k_moe_route_gate_up: router logits (or their parts summed before it: the router-from-y form), the top-k in every
//    block, the shared expert's and the routed experts' gate/up rows with SiLU*mul, in one launch;
//  k_moe_down (moe_down.cu): one warp per hidden row sums, over the k experts and the shared expert, routing
//    weight x (down row . act), and adds it into the residual.
// The router and gate_up as two launches (the reference, and the form where the router reads another input than the
// experts) are in moe_unfused.cu; shared helpers in
// moe_util.cuh, the top-k in moe_route.cuh.
#include <cfloat>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "cuda/decode/moe_route.cuh"
#include "cuda/decode/moe_util.cuh"

namespace lily::cuda {
namespace {

using namespace moe_detail;

// Two act rows at once (row1 < 0: only row0): gate and up of both, all their loads in flight before any math (one
// DRAM round trip for two rows; the same sums, in the same order, as gate_up_row). load() issues the first round of
// loads (all of a 2048-column 4-bit row), finish() dots it, runs any further rounds and writes the two act values
// (ONE: the caller knows there is one round, nch <= chunks_one(), so the matrices are not kept past load()).
// ROWS: act is row blockIdx.y's (row_ptr).
template <int FMT, bool ROWS = false>
struct GateUpPair {
  static constexpr int U = 2;
  static constexpr int chunks_one() { return 32 * U; }
  DMat g[2], u[2];
  int rows[2], r[2], nch;
  uint4 rg[2][U], ru[2][U];
  uint32_t sg[2][U], su[2][U];
  template <class F>  // f(row i, chunk slot v, chunk c) for the lane's chunks of round c0 in both rows
  __device__ __forceinline__ void each(int c0, int lane, F&& f) const {
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int c = c0 + lane + 32 * v;
      if (c < nch)
#pragma unroll
        for (int i = 0; i < 2; ++i)
          if (r[i] >= 0) f(i, v, c);
    }
  }
  __device__ __forceinline__ void load_round(int c0, int lane) {
    each(c0, lane, [&](int i, int v, int c) {
      chunk_load<FMT>(g[i], r[i], c, rg[i][v], sg[i][v]);
      chunk_load<FMT>(u[i], r[i], c, ru[i][v], su[i][v]);
    });
  }
  // slot i for act row `row` (as_row: the matrices of that row, for a slot without one: row < 0)
  __device__ __forceinline__ void set(const MoeArgs& a, const int* s_idx, int i, int row, int as_row) {
    rows[i] = row;
    act_row_mats(a, s_idx, as_row, g[i], u[i], r[i]);
    if (row < 0) r[i] = -1;
    nch = a.gate.m.cols / FmtInfo<FMT>::kElems;
  }
  __device__ __forceinline__ void load(const MoeArgs& a, const int* s_idx, int row0, int row1, int lane) {
    set(a, s_idx, 0, row0, row0);
    set(a, s_idx, 1, row1, row1 < 0 ? row0 : row1);
    load_round(0, lane);
  }
  // slot i's first round alone (load_second: the other slot's after it; the same loads as load())
  __device__ __forceinline__ void load_slot(int i, int lane) {
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int c = lane + 32 * v;
      if (c < nch && r[i] >= 0) {
        chunk_load<FMT>(g[i], r[i], c, rg[i][v], sg[i][v]);
        chunk_load<FMT>(u[i], r[i], c, ru[i][v], su[i][v]);
      }
    }
  }
  // slot 0 holds a shared-expert row (needs no routing) loaded before the wait; slot 1 gets row1 now
  __device__ __forceinline__ void load_second(const MoeArgs& a, const int* s_idx, int row1, int lane) {
    set(a, s_idx, 1, row1, row1 < 0 ? rows[0] : row1);
    load_slot(1, lane);
  }
  template <bool ONE = false, class X>
  __device__ __forceinline__ void finish(const MoeArgs& a, const X& x, int lane) {
    float ga[2] = {0.f, 0.f}, ua[2] = {0.f, 0.f};
    for (int c0 = 0; c0 < (ONE ? 1 : nch); c0 += 32 * U) {
      if (!ONE && c0 > 0) load_round(c0, lane);
      each(c0, lane, [&](int i, int v, int c) {
        ga[i] += x.template dot<FMT>(rg[i][v], sg[i][v], c);
        ua[i] += x.template dot<FMT>(ru[i][v], su[i][v], c);
      });
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      ga[i] = warp_sum(ga[i]);
      ua[i] = warp_sum(ua[i]);
    }
    if (lane == 0)
#pragma unroll
      for (int i = 0; i < 2; ++i)
        if (r[i] >= 0) {
          const float v = silu_f(ga[i]) * ua[i];
          row_ptr<ROWS>(a, a.act)[rows[i]] = v;
        }
  }
};
// A warp's one act row of a second round (rows first only, where stage2_ok), copied into shared memory by
// cp.async as soon as the routing is known, each lane its own chunks of GateUpPair's first round (one round: nch <=
// chunks_one()), dotted after the first pair: its DRAM round trip overlaps the first pair's instead of following it.
// The same sums, in the same order, as gate_up_rows2 of that row alone.
constexpr size_t kStagedRowBytes = 2 * 2 * 32 * (16 + 4);  // StagedRow::Buf (U = 2)
template <int FMT, bool ROWS>
struct StagedRow {
  static constexpr int U = GateUpPair<FMT>::U;
  struct Buf {  // per warp: [chunk slot][gate, up][lane]
    uint4 w[U][2][32];
    uint32_t sb[U][2][32];
  };
  static_assert(sizeof(Buf) == kStagedRowBytes, "kStagedRowBytes");
  __device__ __forceinline__ static void issue(const MoeArgs& a, const int* s_idx, int row, Buf& b, int lane) {
    DMat m[2];
    int r;
    act_row_mats(a, s_idx, row, m[0], m[1], r);
    const int nch = a.gate.m.cols / FmtInfo<FMT>::kElems;
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int c = lane + 32 * v;
      if (c < nch)
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          cp_async16(&b.w[v][j][lane], m[j].w + int64_t(r) * m[j].row_bytes + int64_t(c) * 16);
          if constexpr (fmt_sb(FMT))
            cp_async4(&b.sb[v][j][lane], m[j].sb + int64_t(r) * m[j].sb_row + chunk_group<FMT>(m[j], c));
        }
    }
  }
  template <class X>
  __device__ __forceinline__ static void finish(const MoeArgs& a, int row, const Buf& b, const X& x, int lane) {
    cp_async_wait_all();  // the lane's own copies: no other lane reads them
    const int nch = a.gate.m.cols / FmtInfo<FMT>::kElems;
    float ga = 0.f, ua = 0.f;
#pragma unroll
    for (int v = 0; v < U; ++v) {
      const int c = lane + 32 * v;
      if (c < nch) {
        ga += x.template dot<FMT>(b.w[v][0][lane], fmt_sb(FMT) ? b.sb[v][0][lane] : 0u, c);
        ua += x.template dot<FMT>(b.w[v][1][lane], fmt_sb(FMT) ? b.sb[v][1][lane] : 0u, c);
      }
    }
    ga = warp_sum(ga);
    ua = warp_sum(ua);
    if (lane == 0) row_ptr<ROWS>(a, a.act)[row] = silu_f(ga) * ua;
  }
};

template <int FMT, bool ROWS, class X>
__device__ __forceinline__ void gate_up_rows2(const MoeArgs& a, const int* s_idx, int row0, int row1, const X& x,
                                              int lane) {
  GateUpPair<FMT, ROWS> p;
  p.load(a, s_idx, row0, row1, lane);
  p.finish(a, x, lane);
}

// The XQ form of the f32 values of src (n elements; each thread quantises whole 16-element groups, as load_x does from
// the same values, so the result is the same). Ends with __syncthreads.
template <class X>
__device__ __forceinline__ void requant(const XF& src, X& dst, int n) {
  const int ng = n / 16;
  for (int g0 = 0; g0 < ng; g0 += blockDim.x) {  // uniform over the block (XQ::put shuffles within the warp)
    const int g = g0 + threadIdx.x;
    const bool valid = g < ng;
    float4 v[4] = {};
    if (valid)
#pragma unroll
      for (int i = 0; i < 4; ++i) v[i] = lds4(src.xs, g >> 1, (g & 1) * 4 + i);
    dst.put(g, valid, v);
  }
  __syncthreads();
}

// Router + gate_up in one launch (k_moe_router then k_moe_gate_up where the router's input differs from the experts').
// Warps 0..E of the grid compute the router logits and the shared-expert gate (rows in registers before pdl_wait,
// x in f32 as k_moe_router), the following warps the shared expert's gate/up rows, which need no routing (loaded
// before pdl_wait too, dotted after the barrier); then a barrier that only the router's blocks arrive at, every block
// ranks the E logits itself (route_warp: no serial last block), and the routed experts' rows follow, two per warp in
// flight.
// Saves the router's launch, its last-block fence + atomic + serial top-k, and one x prologue.
// PRE: the router-from-y form (MoeArgs::pre): no router rows, no barrier, the summed logits' top-k after x; RF (PRE
// only, where a row fits one pair's registers): the top-k first and the warp's first routed pair requested before
// the x prologue, so their DRAM round trip overlaps it (the weights, which need x's RMS factor, after it). x's loads
// issued before the rows' too measured slower (docs/performance-log.md).
// ROWS (MoeArgs::rows, n > 1): blockIdx.y is the row, its per-row pointers taken through row_ptr; everything else runs
// as in a launch for that row alone (blockIdx.x / gridDim.x within the row, the barrier and the routing flag in the
// row's route_done).
template <int FMT, int RFMT, class X, bool ROWS, bool PRE = false, bool RF = false>
__global__ void __launch_bounds__(kThreads, 2) k_moe_route_gate_up(const MoeArgs a) {
  static_assert(PRE || !RF, "rows first needs the summed logits");
  extern __shared__ float4 smem4[];
  const int H = a.gate.m.cols, I = a.gate.m.rows, Is = a.sh_gate.rows;
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv(nws + H, H);                              // x of the expert rows
  XF xr(nws + H + (X::bytes(H) + 15) / 16 * 4, H);  // x of the router rows (f32), only in blocks that hold some
  __shared__ float red[32];
  __shared__ int s_idx[kMaxK];
  __shared__ float s_w[kMaxK];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);
  // router rows: E logits, then the shared-expert gate; none where the logits come summed (PRE)
  const int nr = PRE ? 0 : a.E + 1;
  bool rblock = false;  // uniform over the block
  if constexpr (!PRE) rblock = blockIdx.x * (kThreads / 32) < nr;
  pdl_trigger();  // the next kernel (down) may launch at once: its blocks wait on the routing flag
  const bool tr = a.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(a.trace, 0);
  auto bt = [&](int i) { btrace_at(a.btrace, kMoeBtraceBlocks, kMoeBtraceSlots, i); };
  bt(0);

  // this warp's router row in registers before the wait (weights do not depend on the previous kernel)
  const bool rrow = warp < nr, sh = warp == a.E;
  const DMat& m = sh ? a.shg_w : a.router;
  const int mrow = sh ? 0 : warp;
  const int rnch = H / FmtInfo<RFMT>::kElems;
  uint4 raw[kRouterChunks];
  uint32_t sb[kRouterChunks];
#pragma unroll
  for (int u = 0; u < kRouterChunks; ++u) {
    const int c = lane + 32 * u;
    if (rrow && c < rnch) chunk_load<RFMT>(m, mrow, c, raw[u], sb[u]);
  }
  // the shared expert's rows go to the warps after the router's (wrapping around on small grids). The
  // warp's first one has its gate and up loads issued here (weights) and its math after the grid barrier, so the
  // barrier waits for the router rows only
  const int sr0 = ((warp - nr) % nwarps + nwarps) % nwarps;
  const DMat sgu[2] = {a.sh_gate, a.sh_up};
  const DMat* smp[2] = {&sgu[0], &sgu[1]};
  const int srr[2] = {sr0 < Is ? sr0 : -1, sr0 < Is ? sr0 : -1};
  const int snch = H / FmtInfo<FMT>::kElems;
  RowSet<FMT, 2> SP;
  if (!RF && srr[0] >= 0) SP.load(smp, srr, snch, 0, lane);  // RF: the shared rows are pairs' rows
  // RF: work unit w is act row unit_row(w); the shared expert's rows come first, so the first pair of warps
  // < Is holds one that needs no routing: its loads go out before the wait (in the pair's own registers)
  auto unit_row = [&](int w) { return w < Is ? a.k * I + w : w - Is; };
  // stage2: this warp's work ends with one unit of a second round, staged in shared memory (StagedRow)
  const int n_units = a.k * I + Is;  // act rows: the routed experts', then the shared expert's
  const bool staged = RF && a.stage2_off && warp + 2 * nwarps < n_units && warp + 3 * nwarps >= n_units;
  typename StagedRow<FMT, ROWS>::Buf* const sbuf =
      reinterpret_cast<typename StagedRow<FMT, ROWS>::Buf*>(reinterpret_cast<char*>(smem4) + a.stage2_off) +
      (threadIdx.x >> 5);
  GateUpPair<FMT, ROWS> first;  // RF: the warp's first pair, requested before the x prologue
  if (RF && warp < Is) {
    first.set(a, nullptr, 0, a.k * I + warp, a.k * I + warp);
    first.load_slot(0, lane);
  }
  const float* nw = stage_vec(a.norm_w, H, nws);
  pdl_wait();
  if (tr) trace_at(a.trace, 1);
  bt(1);
  PreLogits pl;  // PRE: the logits' parts requested before the x prologue, their top-k after it
  __shared__ __align__(16) float s_pl[PRE ? 256 : 1];
  if constexpr (PRE) pl.load<ROWS>(a);
  __shared__ float s_v[RF ? kMaxK : 1];  // RF: the selected logits
  if constexpr (RF) {
    pl.sum(a, s_pl);
    __syncthreads();
    bt(2);
    if (threadIdx.x < 32) route_pre(s_pl, a.E, a.k, 1.f, s_idx, s_w, s_v);
    __syncthreads();
    bt(3);
    const int u1 = warp + nwarps < n_units ? unit_row(warp + nwarps) : -1;
    if (warp < Is) first.load_second(a, s_idx, u1, lane);
    else if (warp < n_units) first.load(a, s_idx, unit_row(warp), u1, lane);
    if (a.stage2_off) {  // uniform: every thread commits a group (load_x then leaves it pending)
      if (staged) StagedRow<FMT, ROWS>::issue(a, s_idx, unit_row(warp + 2 * nwarps), *sbuf, lane);
      cp_async_commit();
    }
    bt(4);
  }
  float rx = 1.f;  // the RMS factor of x
  // router_xf: the router's blocks normalise x into the f32 form only (their rows need no more), arrive, and build
  // the int8 form while the barrier is pending; the other blocks build the int8 form only
  const bool xf_first = a.router_xf && rblock;
  if (xf_first) load_x(row_ptr<ROWS>(a, a.x), nw, a.eps, H, xr, red, nullptr, {}, tr ? a.trace_x : nullptr);
  else  // both (stage2: the staged row's copies stay pending)
    load_x(row_ptr<ROWS>(a, a.x), nw, a.eps, H, xv, red, rblock ? &xr : nullptr, {}, tr ? a.trace_x : nullptr, &rx,
           false, nullptr, RF && a.stage2_off);
  pdl_trigger();
  if (tr) trace_at(a.trace, 2);
  bt(5);
  if (rrow) router_row<RFMT, ROWS>(a, m, mrow, sh, warp, raw, sb, xr, lane);
  auto act_row = [&](int row) { gate_up_row<FMT, ROWS>(a, s_idx, row, xv, lane); };
  if (tr) trace_at(a.trace, 3);
  if constexpr (PRE) {  // no router rows, no barrier: r * (the parts' sum) are the true logits (RF: summed above)
    if constexpr (!RF) {
      pl.sum(a, s_pl);
      __syncthreads();
    }
  } else {  // only the router's blocks arrive
    const unsigned nrb = unsigned(std::min<int>(gridDim.x, (nr + kThreads / 32 - 1) / (kThreads / 32)));
    router_arrive(row_ptr<ROWS>(a, a.route_done) + 2, rblock);
    if (xf_first) requant(xr, xv, H);
    router_wait(row_ptr<ROWS>(a, a.route_done) + 2, nrb);
  }
  if (tr) trace_at(a.trace, 4);
  if (threadIdx.x < 32) {
    if constexpr (RF) route_weights(s_v, a.k, rx, s_w);
    else if constexpr (PRE) route_pre(s_pl, a.E, a.k, rx, s_idx, s_w);
    else if (a.E <= 256) route_warp<8>(row_ptr<ROWS>(a, a.logits), a.E, a.k, s_idx, s_w);
    else route_warp<kMaxE / 32>(row_ptr<ROWS>(a, a.logits), a.E, a.k, s_idx, s_w);
  }
  if (!RF && srr[0] >= 0) {  // the same sums, in the same order, as gate_up_row
    float acc[2] = {0.f, 0.f};
    for (int c0 = 0; c0 < snch; c0 += 64) {
      if (c0 > 0) SP.load(smp, srr, snch, c0, lane);
      SP.dot(srr, xv, snch, c0, lane, acc);
    }
    acc[0] = warp_sum(acc[0]);
    acc[1] = warp_sum(acc[1]);
    if (lane == 0) row_ptr<ROWS>(a, a.act)[a.k * I + sr0] = silu_f(acc[0]) * acc[1];
  }
  if (!RF)
    for (int r = sr0 + nwarps; r < Is; r += nwarps) act_row(a.k * I + r);
  __syncthreads();
  if (tr) trace_at(a.trace, 5);
  if (a.trace && threadIdx.x == 0) trace_max(a.trace, 6);  // the last block's routing known
  if (blockIdx.x == 0 && threadIdx.x < 32) {  // for the down kernel (k <= 32: warp 0)
    if (threadIdx.x < a.k) {
      row_ptr<ROWS>(a, a.route_idx)[threadIdx.x] = s_idx[threadIdx.x];
      row_ptr<ROWS>(a, a.route_w)[threadIdx.x] = s_w[threadIdx.x];
      // for down's shared-expert gate: rx * (element E's sum)
      if (PRE && threadIdx.x == 0) row_ptr<ROWS>(a, a.shg)[0] = rx;
      __threadfence();
    }
    __syncwarp();
    if (a.early_route && threadIdx.x == 0) {  // published: down may read it now
      if (a.route_packed) {  // the word is the flag (down reads no other)
        unsigned long long v = 0;
        for (int i = 0; i < a.k; ++i) v |= static_cast<unsigned long long>(s_idx[i]) << (8 * i);
        atomicExch(packed_route(row_ptr<ROWS>(a, a.route_done)), v);
      } else {
        atomicExch(row_ptr<ROWS>(a, a.route_done) + 4, 1u);
      }
    }
  }
  bt(6);
  if constexpr (RF) {  // the first pair requested before the x prologue, the rest by units (unit_row) as below
    const int n = n_units;
    if (warp < n) first.template finish<true>(a, xv, lane);
    bt(7);
    if (staged) {
      StagedRow<FMT, ROWS>::finish(a, unit_row(warp + 2 * nwarps), *sbuf, xv, lane);
    } else {
      for (int w = warp + 2 * nwarps; w < n; w += 2 * nwarps)
        gate_up_rows2<FMT, ROWS>(a, s_idx, unit_row(w), w + nwarps < n ? unit_row(w + nwarps) : -1, xv, lane);
    }
  } else {  // two routed rows per warp in flight
    for (int row = warp; row < a.k * I; row += 2 * nwarps)
      gate_up_rows2<FMT, ROWS>(a, s_idx, row, row + nwarps < a.k * I ? row + nwarps : -1, xv, lane);
  }
  if (a.trace) {  // uniform over the launch
    __syncthreads();
    if (threadIdx.x == 0) trace_max(a.trace, 7);
    bt(8);
  }
}

template <class T>
struct XTag {  // selects an activation representation in a launcher (XF / XQ have device-only constructors)
  using type = T;
};

// Whether the rows-first form may stage a second round's act row in shared memory (StagedRow): 16-byte rows.
bool stage2_ok(const MoeArgs& a) {
  auto al = [](const DMat& m, int64_t stride) {
    return (reinterpret_cast<uintptr_t>(m.w) & 15) == 0 && m.row_bytes % 16 == 0 && stride % 16 == 0;
  };
  return al(a.gate.m, a.gate.w_stride) && al(a.up.m, a.up.w_stride) && al(a.sh_gate, 0) && al(a.sh_up, 0);
}

// The fused kernel's dynamic shared memory: norm_w, x in the expert rows' form (xbytes) and in f32, then with
// stage2 the StagedRow buffers (their offset into *stage2_off).
size_t fused_smem(int H, size_t xbytes, bool stage2, int* stage2_off) {
  size_t smem = size_t(H) * 4 + (xbytes + 15) / 16 * 16 + XF::bytes(H);
  if (stage2) {
    smem = (smem + 15) / 16 * 16;
    *stage2_off = int(smem);
    smem += size_t(kThreads / 32) * kStagedRowBytes;
  }
  return smem;
}
int moe_rows(const MoeArgs& a) { return std::max(a.E + 1, a.k * a.gate.m.rows + a.sh_gate.rows); }
// The fused kernel's grid (per row: the launch is that times rows.n): every block must be resident at once (grid
// barrier), at most one wave. The rows of a launch hold theirs side by side (decode_grid gives each its share, the
// caller having set it to rows.n); where the barrier form's would not all fit, a row could wait on blocks never
// scheduled.
template <class K>
int fused_grid(K kern, const MoeArgs& a, size_t smem) {
  allow_smem(kern, smem);  // before the occupancy query: above 48 KB it counts only with the limit raised
  const int resident = resident_grid(kern, kThreads, smem);
  const int g = std::min((moe_rows(a) + 7) / 8, decode_grid(resident));
  if (!a.pre && int64_t(g) * a.rows.n > resident)
    throw Error("moe_route_gate_up: " + std::to_string(a.rows.n) + " rows of " + std::to_string(g) +
                " blocks exceed the " + std::to_string(resident) + " resident blocks its grid barrier needs "
                "(set_decode_grid_share(rows.n) first)");
  return g;
}
}  // namespace

void moe_route_gate_up(const MoeArgs& args, cudaStream_t s, bool pdl) {
  check(args);
  check_rows(args, "moe_route_gate_up");
  MoeArgs a = args;
  // the int8 form exists (4-bit experts)
  a.router_xf = fmt_q4(a.gate.m.fmt) && use_int8_x(a.gate.m.fmt, a.gate.m.cols);
  a.route_packed = route_packed_ok(a);
  if (a.pre) {
    if (a.E > 256 || a.pre_parts < 1 || a.pre_parts > kMoePreMaxParts || !a.shg ||
        (reinterpret_cast<uintptr_t>(a.pre) & 15))
      throw Error("moe_route_gate_up: summed logits need E <= 256, 1..12 aligned parts and a shg output");
    const bool em = a.pre_ps == 1 && a.pre_es % 4 == 0 && a.pre_es >= (a.pre_parts + 3) / 4 * 4;
    if (!em && !(a.pre_es == 1 && a.pre_ps >= a.E + 1))
      throw Error("moe_route_gate_up: summed logits need an element-major (16-byte rows) or part-major layout");
    a.router_xf = 0;
  }
  if (a.router.fmt != a.shg_w.fmt || a.router.cols != a.shg_w.cols || a.router.rows != a.E || a.shg_w.rows != 1 ||
      a.router.cols != a.gate.m.cols)
    throw Error("moe_route_gate_up: router and shared gate must share format and cols with the experts' input");
  const int H = a.gate.m.cols;
  auto run = [&](auto kern, size_t xbytes, bool stage2 = false) {
    const size_t smem = fused_smem(H, xbytes, stage2, &a.stage2_off);
    launch(kern, dim3(fused_grid(kern, a, smem), a.rows.n), dim3(kThreads), smem, s, pdl, a);
  };
  // rows_tag: std::bool_constant<a.rows.n > 1> (the ROWS instantiations)
  auto by_router = [&](auto fmt_tag, auto x_tag, auto rows_tag) {
    constexpr int F = decltype(fmt_tag)::value;
    using X = typename decltype(x_tag)::type;
    constexpr bool R = decltype(rows_tag)::value;
    if (a.pre) {  // the router's format does not matter
      if (H <= GateUpPair<F>::chunks_one() * FmtInfo<F>::kElems)  // rows first
        run(k_moe_route_gate_up<F, kQ8, X, R, true, true>, X::bytes(H), stage2_ok(a));
      else
        run(k_moe_route_gate_up<F, kQ8, X, R, true>, X::bytes(H));
      return;
    }
    switch (a.router.fmt) {
      case kQ4: run(k_moe_route_gate_up<F, kQ4, X, R>, X::bytes(H)); break;
      case kQ8: run(k_moe_route_gate_up<F, kQ8, X, R>, X::bytes(H)); break;
      case kBF16: run(k_moe_route_gate_up<F, kBF16, X, R>, X::bytes(H)); break;
      case kQ4Z:  // a kQ4Z router only beside kQ4Z experts (both from one GPTQ / AWQ / compressed-tensors file)
        if constexpr (F == kQ4Z) run(k_moe_route_gate_up<F, kQ4Z, X, R>, X::bytes(H));
        else throw Error("moe_route_gate_up: a kQ4Z router beside experts in another format needs moe_router + "
                         "moe_gate_up");
        break;
      case kQ4H:  // likewise a kQ4H router only beside kQ4H experts
        if constexpr (F == kQ4H) run(k_moe_route_gate_up<F, kQ4H, X, R>, X::bytes(H));
        else throw Error("moe_route_gate_up: a kQ4H router beside experts in another format needs moe_router + "
                         "moe_gate_up");
        break;
      case kQ8H:  // and a kQ8H router beside kQ8H experts
        if constexpr (F == kQ8H) run(k_moe_route_gate_up<F, kQ8H, X, R>, X::bytes(H));
        else throw Error("moe_route_gate_up: a kQ8H router beside experts in another format needs moe_router + "
                         "moe_gate_up");
        break;
      default:  // the checkpoints keep routers in bf16 or MLX affine codes; moe_router serves any format
        throw Error("moe_route_gate_up: a router in 8-bit codes with f32 scales needs moe_router + moe_gate_up");
    }
  };
  auto by_x = [&](auto fmt_tag, auto x_tag) {
    if (a.rows.n > 1) by_router(fmt_tag, x_tag, std::true_type{});
    else by_router(fmt_tag, x_tag, std::false_type{});
  };
  using Q4 = std::integral_constant<int, kQ4>;
  switch (a.gate.m.fmt) {
    case kQ4:
      if (use_int8_x(kQ4, H)) by_x(Q4{}, XTag<XQ>{});
      else by_x(Q4{}, XTag<XF>{});
      break;
    case kQ4Z:
      if (use_int8_x(kQ4Z, H)) by_x(std::integral_constant<int, kQ4Z>{}, XTag<XQ>{});
      else by_x(std::integral_constant<int, kQ4Z>{}, XTag<XF>{});
      break;
    case kQ4H:
      if (use_int8_x(kQ4H, H)) by_x(std::integral_constant<int, kQ4H>{}, XTag<XQ>{});
      else by_x(std::integral_constant<int, kQ4H>{}, XTag<XF>{});
      break;
    case kQ8: by_x(std::integral_constant<int, kQ8>{}, XTag<XF>{}); break;
    case kQ8H: by_x(std::integral_constant<int, kQ8H>{}, XTag<XF>{}); break;
    case kF8: by_x(std::integral_constant<int, kF8>{}, XTag<XF>{}); break;
    case kI8: by_x(std::integral_constant<int, kI8>{}, XTag<XF>{}); break;
    case kQ6: by_x(std::integral_constant<int, kQ6>{}, XTag<XF>{}); break;
    case kBF16: by_x(std::integral_constant<int, kBF16>{}, XTag<XF>{}); break;
    default: throw Error("moe_route_gate_up: unknown weight format");
  }
}

}  // namespace lily::cuda
