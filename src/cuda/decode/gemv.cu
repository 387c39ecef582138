// Row-parallel fused GEMV for decode (batch 1): one warp per output row, 16-byte coalesced weight loads,
// dequantisation in registers (s*Sum(xq) + b*Sum(x); s*Sum(code x) for the 8-bit-code formats), optional RMSNorm prologue, several matrices sharing one x
// in one launch, optional residual accumulation. Also the embedding-row kernel.

#include <string>
#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "cuda/common/i16_dot.cuh"

namespace lily::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
struct TypeTag {  // a type as a value (the launchers' generic lambdas)
  using type = T;
};

struct GemvParams {  // passed by value (kernel parameter space)
  GemvSeg seg[kMaxSegs];
  int nseg;
  int total_rows;
  const float* x;
  const float* norm_w;
  float eps;
  int cols;
  unsigned long long* trace;  // LILY_PROFILE=trace: [3] entry and x loaded (block 0), last block done; or null
  HeadNorm hn;                // per-head scale of x (hn.ss null: none)
  GemvSide side;              // side rows (side.rows 0: none)
  Rows rows;                  // rows of a verify (kernels.h); the kernels' MR > 1 instantiations only
};

// Side kinds (the kernels' SIDE parameter): none, int16 rows of side.m on the GEMV's x, int16 rows of side.m on the
// raw x (side.m_raw).
constexpr int kSideNone = 0, kSideI16 = 1, kSideI16Raw = 3;
constexpr bool side_reads_raw(int kind) { return kind == kSideI16Raw; }

// One side piece (GemvSide in kernels.h) of a warp: 512 columns, loaded by load() (before the PDL wait for the
// warp's first piece), dotted with x and written by finish(). int16 rows (side.m): two 16-byte loads per lane.
template <int KIND>
struct SidePiece {
  uint4 w[2];
  float rs = 1.f;
  int j = -1, q = 0;  // side row and piece (j < 0: none), uniform over the warp
  __device__ __forceinline__ void load(const GemvParams& p, int unit, int lane) {
    j = -1;
    if (unit >= p.side.rows * p.side.pieces) return;
    j = unit / p.side.pieces;
    q = unit - j * p.side.pieces;
    const uint4* src = reinterpret_cast<const uint4*>(p.side.m + size_t(j) * p.cols + size_t(q) * kGemvSidePiece);
    w[0] = ldg_weight(src + lane);
    w[1] = ldg_weight(src + lane + 32);
    if (lane == 0) rs = p.side.rscale[j];
  }
  // the piece's partial (in lane 0, which holds rs; j >= 0)
  template <class X>
  __device__ __forceinline__ float value(const GemvParams& p, const X& x, int lane) const {
    float acc = 0.f;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      float xv[8];
      x.val8(q * kGemvSidePiece + (lane + 32 * u) * 8, xv);
      acc = dot8_i16(w[u], xv, acc);
    }
    return warp_sum(acc) * rs;
  }
};

// The side pieces of warp `warp`: the first (loaded before the wait, in sp) right after the x prologue, so its
// registers are free for the rows and no side work sits at the launch's tail behind them; the rest (units past the
// grid's warps) loaded and finished after the rows.
// MR > 1: the piece dotted with each row's x (rows p.rows.n), its partial to the row's part.
template <int KIND, int MR, class X>
__device__ __forceinline__ void side_dot(const GemvParams& p, const SidePiece<KIND>& sp, const X (&x)[MR],
                                         const XF (&xr)[MR], int lane) {
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (MR > 1 && r >= p.rows.n) break;
    float v = 0.f;
    if (sp.j >= 0) {
      if constexpr (side_reads_raw(KIND)) v = sp.value(p, xr[r], lane);
      else v = sp.value(p, x[r], lane);
    }
    if (sp.j >= 0 && lane == 0)
      row_at(p.side.part, r, p.rows.stride)[sp.q * p.side.part_q + sp.j * p.side.part_j] = v;
  }
}
template <int KIND, int MR, class X>
__device__ __forceinline__ void side_rest(const GemvParams& p, SidePiece<KIND>& sp, const X (&x)[MR],
                                          const XF (&xr)[MR], int warp, int nwarps, int lane) {
  const int units = p.side.rows * p.side.pieces;
  for (int u = warp + nwarps; u < units; u += nwarps) {
    sp.load(p, u, lane);
    side_dot(p, sp, x, xr, lane);
  }
}

// Global row -> (segment sg, local row r); r = -1 past the end.
__device__ __forceinline__ void resolve_row(const GemvParams& p, int row, int& sg, int& r) {
  sg = 0;
  if (row >= p.total_rows) { r = -1; return; }
  r = row;
  while (sg + 1 < p.nseg && r >= p.seg[sg].m.rows) r -= p.seg[sg++].m.rows;
}

// The x prologue after the PDL wait: x from p.x (normed, head-scaled), or copied from the producer's XQ image.
// xr: the raw x (f32) for the side kind that reads it. Row r (a verify's rows): its x and head-norm sums.
template <int SIDE, class X>
__device__ __forceinline__ void gemv_x(const GemvParams& p, int r, const float* nw, X& xv, XF& xr, float* red) {
  HeadNorm hn = p.hn;
  hn.ss = row_at(hn.ss, r, p.rows.stride);
  hn.xq = row_at(hn.xq, r, p.rows.stride);
  if constexpr (X::kPairs) {
    if (hn.xq) {
      load_xq_image(hn.xq, p.cols, xv, hn);
      return;
    }
  }
  const float* x = row_at(p.x, r, p.rows.stride);
  // two calls, not one with `q ? &xr : nullptr` (a runtime choice of a local's address puts xr on the stack)
  if constexpr (side_reads_raw(SIDE)) load_x(x, nw, p.eps, p.cols, xv, red, &xr, hn, nullptr, nullptr, true);
  else load_x(x, nw, p.eps, p.cols, xv, red, nullptr, hn);
}

// Shared memory: the staged norm_w, then the X form of x, then (side kinds reading it) the raw x. MR > 1: the rows'
// X forms one slot apart (a slot: XF's bytes, which hold either form), then the rows' raw x.
__host__ __device__ inline int x_slot_floats(int cols) { return int((XF::bytes(cols) + 15) / 16 * 4); }
template <class X, int MR>
__device__ __forceinline__ void x_forms(float* nws, int cols, int n, X (&xv)[MR], XF (&xr)[MR]) {
  if constexpr (MR == 1) {
    xv[0] = X(nws + cols, cols);
    xr[0] = XF(nws + cols + (X::bytes(cols) + 15) / 16 * 4, cols);
  } else {
    const int st = x_slot_floats(cols);
#pragma unroll
    for (int r = 0; r < MR; ++r) {
      xv[r] = X(nws + cols + r * st, cols);
      xr[r] = XF(nws + cols + (n + r) * st, cols);
    }
  }
}
// Each row's x prologue (MR > 1: rows p.rows.n).
template <int SIDE, int MR, class X>
__device__ __forceinline__ void gemv_xs(const GemvParams& p, const float* nw, X (&xv)[MR], XF (&xr)[MR], float* red) {
#pragma unroll
  for (int r = 0; r < MR; ++r) {
    if (MR > 1 && r >= p.rows.n) break;
    gemv_x<SIDE>(p, r, nw, xv[r], xr[r], red);
  }
}

// X: activation representation (XF: f32, any format; XQ: int8 hi+lo with dp4a, 4-bit and kQ6 weights).
// R: rows per warp in flight (rows warp, warp + nwarps, ..., then the next R): 2, or 4 for matrices with >= 3
// rows per warp (one DRAM round trip fewer per warp on the 12k-row DeltaNet in_proj).
// SIDE: the kind of the launch's side rows (GemvSide; kSideNone: the plain GEMV).
// MR: 1, or kMaxRows for a verify's rows (p.rows.n of them): each weight row loaded once and dotted with every row's
// x, the same sums per row as MR = 1.
template <int FMT, class X, int R, int SIDE = kSideNone, int MR = 1>
__global__ void __launch_bounds__(kThreads, 2) k_gemv(const GemvParams p) {
  extern __shared__ float4 smem4[];
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv[MR];
  XF xr[MR];  // side kinds reading the raw x only
  x_forms(nws, p.cols, p.rows.n, xv, xr);
  __shared__ float red[32];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);

  const int nch = p.cols / FmtInfo<FMT>::kElems;
  // Weights do not depend on the previous kernel: load this warp's first rows before waiting on it and before
  // the x prologue, so their latency overlaps both.
  RowSet<FMT, R> P;
  int row = warp, sg[R], rr[R];
  const DMat* mp[R];
  auto resolve_set = [&] {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      resolve_row(p, row + i * nwarps, sg[i], rr[i]);
      mp[i] = &p.seg[sg[i]].m;
    }
  };
  const bool tr = p.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(p.trace, 0);
  resolve_set();
  if (rr[0] >= 0) P.load(mp, rr, nch, 0, lane);
  SidePiece<SIDE> sp;
  if constexpr (SIDE != kSideNone) sp.load(p, warp, lane);
  const float* nw = stage_vec(p.norm_w, p.cols, nws);
  pdl_wait();
  gemv_xs<SIDE>(p, nw, xv, xr, red);
  pdl_trigger();
  if (tr) trace_at(p.trace, 1);
  if constexpr (SIDE != kSideNone) side_dot(p, sp, xv, xr, lane);

  while (rr[0] >= 0) {  // R rows per warp in flight, the next R loaded before this set's reductions
    float acc[MR][R];
#pragma unroll
    for (int j = 0; j < MR; ++j)
#pragma unroll
      for (int i = 0; i < R; ++i) acc[j][i] = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 64) {
      if (c0 > 0) P.load(mp, rr, nch, c0, lane);
      if constexpr (MR == 1) P.dot(rr, xv[0], nch, c0, lane, acc[0]);
      else P.dot_rows(rr, xv, p.rows.n, nch, c0, lane, acc);
    }
    int cs[R], cr[R];
#pragma unroll
    for (int i = 0; i < R; ++i) { cs[i] = sg[i]; cr[i] = rr[i]; }
    row += R * nwarps;
    resolve_set();
    if (rr[0] >= 0) P.load(mp, rr, nch, 0, lane);
#pragma unroll
    for (int j = 0; j < MR; ++j) {
      if (MR > 1 && j >= p.rows.n) break;
#pragma unroll
      for (int i = 0; i < R; ++i) acc[j][i] = warp_sum(acc[j][i]);
      if (lane == 0)
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (cr[i] >= 0) {
            const GemvSeg& g = p.seg[cs[i]];
            float* y = row_at(g.y, j, p.rows.stride);
            y[cr[i]] = g.accumulate ? y[cr[i]] + acc[j][i] : acc[j][i];
          }
    }
  }
  if constexpr (SIDE != kSideNone) side_rest(p, sp, xv, xr, warp, nwarps, lane);
  if (p.trace) {  // uniform over the launch
    __syncthreads();
    if (threadIdx.x == 0) trace_max(p.trace, 2);
  }
}

// One row per warp (total_rows <= warps of the grid) with the whole row in flight before the PDL wait: NP pieces of
// 64 chunks (the out projections' 4096-column 4-bit rows: 2), so no DRAM round trip follows the x prologue. The same
// sums in the same order as k_gemv (piece after piece into one per-lane accumulator). MR: 1, or kMaxRows for a
// verify's rows (p.rows.n of them, each weight row dotted with every row's x, as k_gemv's MR).
template <int FMT, class X, int NP, int SIDE = kSideNone, int MR = 1>
__global__ void __launch_bounds__(kThreads, 2) k_gemv_whole(const GemvParams p) {
  extern __shared__ float4 smem4[];
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv[MR];
  XF xr[MR];  // side kinds reading the raw x only
  x_forms(nws, p.cols, p.rows.n, xv, xr);
  __shared__ float red[32];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int n = MR == 1 ? 1 : p.rows.n;  // the guards j < n below are warp-uniform
  int sg, r;
  resolve_row(p, warp, sg, r);
  const int nch = p.cols / FmtInfo<FMT>::kElems;
  const DMat* mp[1] = {&p.seg[sg].m};
  const int rr[1] = {r};
  const bool tr = p.trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(p.trace, 0);
  RowSet<FMT, 1> P[NP];
  if (r >= 0)
#pragma unroll
    for (int k = 0; k < NP; ++k) P[k].load(mp, rr, nch, 64 * k, lane);
  SidePiece<SIDE> sp;
  if constexpr (SIDE != kSideNone) sp.load(p, warp, lane);
  const float* nw = stage_vec(p.norm_w, p.cols, nws);
  pdl_wait();
  // y[r] to accumulate into, read right after the wait beside the x prologue (not after the dots): final now (its
  // writers ran before the kernel this one waited for); only this warp writes it. A verify's rows read theirs
  // after the dots (registers).
  const bool early = MR == 1 && r >= 0 && lane == 0 && p.seg[sg].accumulate;
  const float y0 = early ? __ldcg(p.seg[sg].y + r) : 0.f;
  gemv_xs<SIDE>(p, nw, xv, xr, red);
  pdl_trigger();
  if (tr) trace_at(p.trace, 1);
  if constexpr (SIDE != kSideNone) side_dot(p, sp, xv, xr, lane);
  if (r >= 0) {
    float acc[MR][1];
#pragma unroll
    for (int j = 0; j < MR; ++j) acc[j][0] = 0.f;
#pragma unroll
    for (int k = 0; k < NP; ++k) {
      if constexpr (MR == 1) P[k].dot(rr, xv[0], nch, 64 * k, lane, acc[0]);
      else P[k].dot_rows(rr, xv, n, nch, 64 * k, lane, acc);
    }
#pragma unroll
    for (int j = 0; j < MR; ++j) {
      if (j >= n) break;
      acc[j][0] = warp_sum(acc[j][0]);
      if (lane == 0) {
        const GemvSeg& g = p.seg[sg];
        float* y = row_at(g.y, j, p.rows.stride);
        y[r] = g.accumulate ? (early ? y0 : y[r]) + acc[j][0] : acc[j][0];
      }
    }
  }
  if constexpr (SIDE != kSideNone) side_rest(p, sp, xv, xr, warp, gridDim.x * (kThreads / 32), lane);
  if (p.trace) {  // uniform over the launch
    __syncthreads();
    if (threadIdx.x == 0) trace_max(p.trace, 2);
  }
}

__global__ void __launch_bounds__(kThreads) k_embed(const DMat E, const int32_t* in_ids, const StepCtl* ctl,
                                                    float* x) {
  pdl_wait();
  pdl_trigger();
  const int64_t id = in_ids[ctl->cursor];
  for (int i = threadIdx.x; i < E.cols; i += blockDim.x) x[i] = dmat_at(E, E.w, E.sb, id, i);
}

bool g_int8_x = true;
int g_grid_share = 1;

}  // namespace

void set_decode_int8_x(bool on) { g_int8_x = on; }
void set_decode_grid_share(int share) { g_grid_share = std::max(share, 1); }
int decode_grid(int resident) { return std::max(1, resident / g_grid_share); }
bool decode_int8_x() { return g_int8_x; }
bool use_int8_x(int fmt, int cols) {
  return g_int8_x && (fmt_q4(fmt) || fmt == kQ6) && cols % 32 == 0 && cols <= 32 * 256;
}

size_t xq_image_bytes(int n) { return XQ::bytes(n); }

size_t gemv_smem_bytes(int cols) { return size_t(cols) * 8 + size_t(cols / 16) * 4; }  // x, staged norm_w, sums

void gemv(const GemvSeg* segs, int nseg, const float* x, const float* norm_w, float eps, cudaStream_t s,
          bool pdl, unsigned long long* trace, const HeadNorm* hn, const GemvSide* side, const Rows& rows) {
  if (nseg < 1 || nseg > kMaxSegs) throw Error("gemv: bad segment count");
  GemvParams p = {};
  const bool multi = rows.n > 1;
  if (rows.n < 1 || rows.n > kMaxRows || (multi && trace))
    throw Error("gemv: rows must be 1 to " + std::to_string(kMaxRows) + ", without trace stamps for more than one");
  p.rows = rows;
  if (side && side->rows > 0) {
    if (!side->m || !side->rscale || (reinterpret_cast<uintptr_t>(side->m) & 15) || !side->part ||
        side->pieces < 1 || side->part_q < 0 || side->part_j < 0 || side->pieces * kGemvSidePiece != segs[0].m.cols)
      throw Error("gemv: side rows need int16 rows (16-byte aligned, with scales) of pieces * 512 columns, and "
                  "partials");
    if (side->m_raw && hn)
      throw Error("gemv: side rows on the raw x need x itself (no head norm)");
    p.side = *side;
  }
  if (hn) {
    if (norm_w || !hn->ss || hn->dim < 16 || hn->dim % 16 || segs[0].m.cols % hn->dim || hn->parts < 1 ||
        hn->parts > kHeadNormMaxParts)
      throw Error("gemv: head norm needs no norm_w, sums, dim a multiple of 16 dividing cols, 1..8 parts");
    if (hn->xq && (!use_int8_x(segs[0].m.fmt, segs[0].m.cols) || hn->dim % 32))
      throw Error("gemv: an XQ image x needs 4-bit or kQ6 weights on the int8-x path and heads of a multiple of 32");
    p.hn = *hn;
  }
  p.nseg = nseg;
  p.x = x;
  p.norm_w = norm_w;
  p.eps = eps;
  p.trace = trace;
  p.cols = segs[0].m.cols;
  for (int i = 0; i < nseg; ++i) {
    if (segs[i].m.fmt != segs[0].m.fmt || segs[i].m.cols != p.cols)
      throw Error("gemv: segments differ in format or cols");
    p.seg[i] = segs[i];
    p.total_rows += segs[i].m.rows;
  }
  if (p.cols % 32 != 0) throw Error("gemv: cols must be a multiple of 32");
  const int wpb = kThreads / 32;
  // + the raw x
  const bool raw = p.side.rows > 0 && p.side.m_raw;
  // a verify's rows: the staged norm_w, then one x slot per row (two with the raw x)
  const size_t smem = multi ? size_t(p.cols) * 4 + size_t(raw ? 2 * rows.n : rows.n) * x_slot_floats(p.cols) * 4
                            : gemv_smem_bytes(p.cols) + (raw ? XF::bytes(p.cols) + 16 : 0);
  const int units = std::max(p.total_rows, p.side.rows * p.side.pieces);  // warps with work
  auto grid = [&](auto kern) {
    allow_smem(kern, smem);
    return std::min((units + wpb - 1) / wpb, decode_grid(resident_grid(kern, kThreads, smem)));
  };
  auto whole = [&](auto kw) {  // 4-bit, one row per warp in one wave: the whole row (2 x 64 chunks) before the wait
    const int nch = p.cols / FmtInfo<kQ4>::kElems;
    if (nch <= 64 || nch > 128) return false;
    const int b = grid(kw);
    if (units > b * wpb) return false;
    launch(kw, dim3(b), dim3(kThreads), smem, s, pdl, p);
    return true;
  };
  auto run = [&](auto k2, auto k4) {  // 4 rows per warp in flight once each warp has >= 3 rows
    const int b2 = grid(k2);
    if (p.total_rows >= 3 * b2 * wpb) {  // (b2 from units >= total_rows)
      const int b4 = grid(k4);
      launch(k4, dim3(b4), dim3(kThreads), smem, s, pdl, p);
    } else {
      launch(k2, dim3(b2), dim3(kThreads), smem, s, pdl, p);
    }
  };
  // one instantiation set per side kind (tag: std::integral_constant<int, kind>)
  auto by_fmt = [&](auto tag) {
    constexpr int K = decltype(tag)::value;
    // one format (std::integral_constant) and x form (TypeTag): the whole-row kernel (4-bit rows that fit it), else
    // 2 / 4 weight rows per warp; a verify's rows (MR = kMaxRows) 2 per warp, or 2 / 4 for two rows (MR = 2)
    auto go = [&](auto fmt, auto form) {
      constexpr int F = decltype(fmt)::value;
      using X = typename decltype(form)::type;
      if (multi) {
        if constexpr (fmt_q4(F))
          if (whole(k_gemv_whole<F, X, 2, K, kMaxRows>)) return;
        if constexpr (fmt_q4(F) && std::is_same_v<X, XQ>)
          if (p.rows.n == 2) {  // two rows (one draft): 4 weight rows per warp in flight, as a plain step's
            run(k_gemv<F, X, 2, K, 2>, k_gemv<F, X, 4, K, 2>);
            return;
          }
        auto kr = k_gemv<F, X, 2, K, kMaxRows>;
        launch(kr, dim3(grid(kr)), dim3(kThreads), smem, s, pdl, p);
        return;
      }
      if constexpr (fmt_q4(F))
        if (whole(k_gemv_whole<F, X, 2, K>)) return;
      run(k_gemv<F, X, 2, K>, k_gemv<F, X, 4, K>);
    };
    auto int8_or_f32 = [&](auto fmt) {  // the formats with an int8-x path (4-bit, kQ6)
      if (use_int8_x(decltype(fmt)::value, p.cols)) go(fmt, TypeTag<XQ>{});
      else go(fmt, TypeTag<XF>{});
    };
    switch (segs[0].m.fmt) {
      case kQ4: int8_or_f32(std::integral_constant<int, kQ4>{}); break;
      case kQ4Z: int8_or_f32(std::integral_constant<int, kQ4Z>{}); break;
      case kQ4H: int8_or_f32(std::integral_constant<int, kQ4H>{}); break;
      case kQ6: int8_or_f32(std::integral_constant<int, kQ6>{}); break;
      case kQ8: go(std::integral_constant<int, kQ8>{}, TypeTag<XF>{}); break;
      case kQ8H: go(std::integral_constant<int, kQ8H>{}, TypeTag<XF>{}); break;
      case kBF16: go(std::integral_constant<int, kBF16>{}, TypeTag<XF>{}); break;
      case kF8: go(std::integral_constant<int, kF8>{}, TypeTag<XF>{}); break;
      case kI8: go(std::integral_constant<int, kI8>{}, TypeTag<XF>{}); break;
      default: throw Error("gemv: unknown format");
    }
  };
  if (p.side.rows <= 0) by_fmt(std::integral_constant<int, kSideNone>{});
  else if (p.side.m_raw) by_fmt(std::integral_constant<int, kSideI16Raw>{});
  else by_fmt(std::integral_constant<int, kSideI16>{});
}

void embed(const DMat& E, const int32_t* in_ids, const StepCtl* ctl, float* x, cudaStream_t s, bool pdl) {
  launch(k_embed, dim3(1), dim3(kThreads), 0, s, pdl, E, in_ids, ctl, x);
}

}  // namespace lily::cuda
