// Greedy sampling on the GPU: the lm_head GEMV (final RMSNorm prologue, one warp per vocab row) writes the logits
// and folds a running argmax into one 64-bit atomicMax (ordered logit << 32 | ~id, so ties pick the lower id).
// The last block to finish writes the id to out_ids[cursor], feeds it to the next step's input, advances the
// step (cursor, pos) and resets the accumulators: the whole step can be replayed from a CUDA graph.
// The rows of a speculative verify (Rows) go in one launch: each weight row is read once and dotted with every row's
// x, each row keeping its own logits, argmax and step (its StepCtl), as a launch for that row alone would.
#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/common/device_util.cuh"
#include "engine/sample_math.h"

namespace lily::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long pack_best(float v, int id) {
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotone float -> uint
  return (static_cast<unsigned long long>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

// The bytes of one row's x form in shared memory, 16-byte aligned so that the rows' forms sit side by side.
template <class X>
__host__ __device__ inline size_t x_step(int cols) {
  return (X::bytes(cols) + 15) & ~size_t(15);
}

// The last block's end of one row's step (ctl: that row's): the argmax id to out_ids[cursor] and to the next step's
// input, cursor and pos advanced; out_ids null: logits only (the step sampler, sample_step, picks the id and advances
// the step). The row's argmax accumulator is reset for the next launch.
__device__ __forceinline__ void finish_row(StepCtl* ctl, int32_t* in_ids, int32_t* out_ids) {
  if (out_ids) {
    const unsigned long long b = atomicAdd(&ctl->best, 0ull);
    const int id = static_cast<int>(~static_cast<uint32_t>(b & 0xffffffffu));
    const int cur = ctl->cursor;
    out_ids[cur] = id;
    if (cur + 1 >= ctl->n_given) in_ids[cur + 1] = id;
    ctl->cursor = cur + 1;
    ctl->pos = ctl->pos + 1;
  }
  ctl->best = 0;
}

// kRows: rows per set (~117 rows per warp at V = 248k): 2 with NB > 1; with NB = 1, 4.
// X: activation form, as the GEMVs (XQ: int8 hi+lo x with dp4a for 4-bit and kQ6 weights where decode_int8_x() is on, XF:
// f32); the f32 form made this 286 MB GEMV issue-bound.
// NB = 2 (4-bit rows of at most 64 chunks, kRows = 2): NB row sets per warp; while one set's dots
// run the others' loads are in flight, and the dotted set then requests the rows NB sets on (NB = 1: the next set's
// loads go out only after this set's dots). The NB loop with a chunk loop inside (so that it served NB = 1 and wider
// rows too, in place of the separate NB = 1 loop) made this kernel ~30 us slower per step (rows done
// 82.5 -> 112.7 us after the last layer, docs/performance-log.md), so the two loops stay.
// MR: the most rows (Rows, a speculative verify) per launch; 1: the plain kernel (rows ignored). MR > 1 (NB = 1):
// rows.n <= MR rows, each with its x, logits and StepCtl at rows.stride and its x form in shared memory after the
// previous row's (x_step); each weight row loaded is dotted with every row's x, and each row keeps its own argmax.
// A lane's sum for one logit runs over chunks lane, lane + 32, ... in that order whatever kRows and NB are (RowSet
// load/dot over [c0, c0 + 64), acc from 0), then warp_sum: each row's logits and id are those of a plain launch.
template <int FMT, int kRows, class X, int NB, int MR>
__global__ void __launch_bounds__(kThreads, 2) k_lm_head(const DMat W, const float* x, const float* norm_w, float eps,
                                                      float* logits, int32_t* in_ids, int32_t* out_ids,
                                                      StepCtl* ctl, unsigned long long* trace, const Rows rows) {
  static_assert(MR == 1 || NB == 1, "k_lm_head: the rows form keeps one row set per warp");
  const int n = MR == 1 ? 1 : rows.n;  // the guards j < n below are warp-uniform; their loops unroll over MR
  if (MR > 1) trace = nullptr;
  auto at = [&](auto* p, int j) { return MR == 1 ? p : row_at(p, j, rows.stride); };  // row j's copy of p
  extern __shared__ float4 smem4[];
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv(nws + W.cols, W.cols);  // row 0's x form; row j's: xform(j), x_step bytes after row j - 1's
  auto xform = [&](int j) {
    return j == 0 ? xv : X(reinterpret_cast<char*>(nws + W.cols) + size_t(j) * x_step<X>(W.cols), W.cols);
  };
  X xa[MR];  // MR > 1: the rows' x forms
#pragma unroll
  for (int j = 0; j < MR; ++j) xa[j] = xform(j);
  __shared__ float red[32];
  __shared__ unsigned long long wbest[MR][kThreads / 32];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const int warp = blockIdx.x * (kThreads / 32) + wib;
  const int nwarps = gridDim.x * (kThreads / 32);
  const int nch = W.cols / FmtInfo<FMT>::kElems;
  // kRows rows per warp in flight (row, row + nwarps, ...), the next set loaded before this set's reductions;
  // rows ascend per warp
  RowSet<FMT, kRows> P;
  const DMat* mp[kRows];
  int rr[kRows];
  int row = warp;
  auto set_rows = [&] {
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      const int r = row + i * nwarps;
      rr[i] = r < W.rows ? r : -1;
      mp[i] = &W;
    }
  };
  const bool tr = trace && threadIdx.x == 0 && blockIdx.x == 0;
  if (tr) trace_at(trace, 0);
  if (trace && threadIdx.x == 0) {  // the first and the last block's entry (slot 3 reset by the last block)
    const unsigned long long t = globaltimer();
    atomicMin(trace + 3, t);
    atomicMax(trace + 4, t);
  }
  set_rows();
  if (NB == 1 && rr[0] >= 0) P.load(mp, rr, nch, 0, lane);
  RowSet<FMT, kRows> S[NB > 1 ? NB : 1];  // NB > 1: the sets, set b holding the rows of base rs[b][0]
  int rs[NB > 1 ? NB : 1][kRows];
  auto rows_at = [&](int base, int (&r)[kRows]) {
#pragma unroll
    for (int i = 0; i < kRows; ++i) r[i] = base + i * nwarps < W.rows ? base + i * nwarps : -1;
  };
  if (NB > 1) {
#pragma unroll
    for (int b = 0; b < NB; ++b) {
      rows_at(row + b * kRows * nwarps, rs[b]);
      if (rs[b][0] >= 0) S[b].load(mp, rs[b], nch, 0, lane);
    }
  }
  const float* nw = stage_vec(norm_w, W.cols, nws);
  pdl_wait();
  if (tr) trace_at(trace, 1);
  for (int j = 0; j < n; ++j) {  // each row's x normed and put in its form as a plain launch does
    X xj = xform(j);
    load_x(at(x, j), nw, eps, W.cols, xj, red);
  }
  pdl_trigger();
  int bi[MR];  // row j's best id and its logit
  float bv[MR];
#pragma unroll
  for (int j = 0; j < MR; ++j) {
    bv[j] = -FLT_MAX;
    bi[j] = 0;
  }
  auto take = [&](const float (&acc)[kRows], const int (&cr)[kRows], int j) {  // rows ascend per warp
    float* lg = at(logits, j);
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (cr[i] < 0) continue;  // warp-uniform
      const float v = warp_sum(acc[i]);
      if (lane == 0) lg[cr[i]] = v;
      if (v > bv[j]) { bv[j] = v; bi[j] = cr[i]; }  // strict > keeps the lowest id on ties
    }
  };
  if (NB > 1) {
    bool go = rs[0][0] >= 0;
    while (go) {
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        if (!go || rs[b][0] < 0) {  // warp-uniform; the sets' bases ascend, so every later set is empty too
          go = false;
          continue;
        }
        float acc[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) acc[i] = 0.f;
        S[b].dot(rs[b], xv, nch, 0, lane, acc);
        int cr[kRows];
#pragma unroll
        for (int i = 0; i < kRows; ++i) cr[i] = rs[b][i];
        row += kRows * nwarps;  // the next set's base
        rows_at(row + (NB - 1) * kRows * nwarps, rs[b]);
        if (rs[b][0] >= 0) S[b].load(mp, rs[b], nch, 0, lane);
        take(acc, cr, 0);
      }
    }
  }
  while (NB == 1 && rr[0] >= 0) {
    float acc[MR][kRows];  // [x row][weight row]
#pragma unroll
    for (int j = 0; j < MR; ++j)
#pragma unroll
      for (int i = 0; i < kRows; ++i) acc[j][i] = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 64) {
      if (c0 > 0) P.load(mp, rr, nch, c0, lane);
      if constexpr (MR == 1) P.dot(rr, xv, nch, c0, lane, acc[0]);
      else P.dot_rows(rr, xa, n, nch, c0, lane, acc);
    }
    int cr[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) cr[i] = rr[i];
    row += kRows * nwarps;
    set_rows();
    if (rr[0] >= 0) P.load(mp, rr, nch, 0, lane);
#pragma unroll
    for (int j = 0; j < MR; ++j)
      if (j < n) take(acc[j], cr, j);
  }
#pragma unroll
  for (int j = 0; j < MR; ++j)
    if (j < n && lane == 0) wbest[j][wib] = pack_best(bv[j], bi[j]);
  __syncthreads();
  if (threadIdx.x == 0) {
    trace_max(trace, 2);  // the last block's rows done
    for (int j = 0; j < n; ++j) {
      unsigned long long b = 0;
      for (int w = 0; w < kThreads / 32; ++w) b = max(b, wbest[j][w]);
      atomicMax(&at(ctl, j)->best, b);
    }
    __threadfence();
    s_last = atomicAdd(&ctl->lm_done, 1u) == gridDim.x - 1;  // the rows' blocks counted on row 0's
  }
  __syncthreads();
  if (s_last && threadIdx.x == 0) {
    __threadfence();
    for (int j = 0; j < n; ++j) finish_row(at(ctl, j), in_ids, out_ids);
    ctl->lm_done = 0;
    if (trace) {  // this step's first entry kept in slot 5
      trace[5] = atomicAdd(trace + 3, 0ull);
      trace[3] = ~0ull;
    }
  }
}

// A plain launch's kernel, k_lm_head<FMT, kRows, X, NB, 1>; its rows form (n > 1) keeps the format and the x form.
template <int FMT, int kRows, class X, int NB>
struct LmCfg {
  static constexpr int kFmt = FMT, kR = kRows, kNB = NB;
  using XT = X;
};
// The rows form's rows per set: with MR x rows the accumulators are MR * kRows registers, and each weight chunk
// loaded already feeds n dots, so one set of 2 rows (NB = 1) keeps the loads busy enough.
constexpr int kRowsMR = 2;

}  // namespace

void lm_head_argmax(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, int32_t* in_ids,
                    int32_t* out_ids, StepCtl* ctl, cudaStream_t s, bool pdl, unsigned long long* trace,
                    const Rows& rows) {
  if (rows.n < 1 || rows.n > kMaxRows)
    throw Error("lm_head_argmax: " + std::to_string(rows.n) + " rows (1 to " + std::to_string(kMaxRows) + ")");
  if (rows.n > 1 && trace) throw Error("lm_head_argmax: no trace with rows (n > 1)");
  auto run = [&](auto kern, size_t smem) {
    allow_smem(kern, smem);
    const int blocks = std::min((W.rows + 7) / 8, decode_grid(resident_grid(kern, kThreads, smem)));
    launch(kern, dim3(blocks), dim3(kThreads), smem, s, pdl, W, x, norm_w, eps, logits, in_ids, out_ids, ctl, trace,
           rows);
  };
  auto go = [&](auto cfg) {  // cfg: LmCfg
    using C = decltype(cfg);
    using X = typename C::XT;
    if (rows.n == 1) {  // norm_w + the larger x form (XF)
      run(k_lm_head<C::kFmt, C::kR, X, C::kNB, 1>, size_t(W.cols) * 8 + size_t(W.cols / 16) * 4);
    } else {  // norm_w + the rows' x forms
      run(k_lm_head<C::kFmt, kRowsMR, X, 1, kMaxRows>, size_t(W.cols) * 4 + size_t(rows.n) * x_step<X>(W.cols));
    }
  };
  // one chunk pair per lane and row (Q4): two sets of 2 rows per warp (sets of 4 rows spill: measured slower)
  const bool two_sets = W.cols <= 64 * FmtInfo<kQ4>::kElems;
  auto q4 = [&](auto fmt) {  // the 4-bit formats (fmt: std::integral_constant<int, kQ4, kQ4Z or kQ4H>)
    constexpr int F = decltype(fmt)::value;
    if (!use_int8_x(F, W.cols)) go(LmCfg<F, 4, XF, 1>{});
    else if (two_sets) go(LmCfg<F, 2, XQ, 2>{});
    else go(LmCfg<F, 4, XQ, 1>{});
  };
  switch (W.fmt) {
    case kQ4: q4(std::integral_constant<int, kQ4>{}); break;
    case kQ4Z: q4(std::integral_constant<int, kQ4Z>{}); break;
    case kQ4H: q4(std::integral_constant<int, kQ4H>{}); break;
    case kQ8: go(LmCfg<kQ8, 4, XF, 1>{}); break;
    case kQ8H: go(LmCfg<kQ8H, 4, XF, 1>{}); break;
    case kF8: go(LmCfg<kF8, 4, XF, 1>{}); break;
    case kI8: go(LmCfg<kI8, 4, XF, 1>{}); break;
    case kQ6:  // 16-column chunks: one set of 4 rows, on int8 x where it is on
      if (use_int8_x(kQ6, W.cols)) go(LmCfg<kQ6, 4, XQ, 1>{});
      else go(LmCfg<kQ6, 4, XF, 1>{});
      break;
    case kBF16: go(LmCfg<kBF16, 4, XF, 1>{}); break;
    default: throw Error("lm_head_argmax: unknown weight format");
  }
}

}  // namespace lily::cuda

// ---- step sampler (algorithm: engine/step_sampler.h; the host reference there must give the same ids) ----
// Nine kernels over the vocabulary in blocks of 1024 ids (256 threads x 4 consecutive ids):
//  prep: adjusted logits -> adj[] (-inf where a constraint's mask refuses the token), argmax, top-k radix digit 0 (histogram of key >> 24); the last block finds mx
//        and the min-p threshold and picks the top-k digit;
//  topk<1..3>: the next 8 bits of the k-th largest key (only when top-k is on);
//  topp<0..3>: the same radix select on the candidates' fixed-point mass for the nucleus threshold (top-p on);
//  draw: per-block candidate mass; the last block draws the target, finds its block by a scan of the block
//        sums and the id by a scan inside that block, then writes the id and advances the step.
// Every "last block" is the one that increments `done` to gridDim.x - 1; it resets the counter for the next kernel.
namespace lily::cuda {

namespace {
constexpr int kST = 256, kSPer = 4, kSChunk = kST * kSPer, kSMaxBlocks = 512;
}

struct SampWork {
  samp::StepParams p;
  unsigned long long step;
  unsigned long long best;  // packed (key << 32 | ~id) argmax of the adjusted logits
  float mx, thr_m;          // max adjusted logit, min-p logit threshold
  unsigned int thr;         // key threshold (top-k, then top-p)
  unsigned int mode;        // 1: draw (not greedy, mx finite), 2: top-k rounds, 4: top-p rounds
  unsigned int kprefix, krem, pprefix;
  unsigned long long P, pabove;
  unsigned int done;
  unsigned int hcnt[256];
  unsigned long long hmass[256];
  unsigned long long chunk[kSMaxBlocks];
};

size_t samp_work_bytes(int) { return sizeof(SampWork); }

namespace {

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
  for (int o = 16; o; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block (kST threads) inclusive scan of one value per thread in thread order.
__device__ unsigned long long block_scan_u64(unsigned long long v, unsigned long long* sm) {
  const int t = threadIdx.x;
  sm[t] = v;
  __syncthreads();
  for (int off = 1; off < kST; off <<= 1) {
    const unsigned long long u = t >= off ? sm[t - off] : 0ull;
    __syncthreads();
    sm[t] += u;
    __syncthreads();
  }
  const unsigned long long r = sm[t];
  __syncthreads();
  return r;
}

// h[256] in shared memory (overwritten by suffix sums): the largest digit d with sum_{b >= d} h[b] >= need (the
// caller guarantees sum h >= need); *above = sum_{b > d} h[b]. All kST threads call it.
template <class T>
__device__ int find_digit(T* h, T need, T* above) {
  __shared__ int s_d;
  __shared__ T s_above;
  const int t = threadIdx.x;
  if (t == 0) {
    s_d = 0;
    s_above = 0;
  }
  for (int off = 1; off < 256; off <<= 1) {
    const T v = h[t] + (t + off < 256 ? h[t + off] : T(0));
    __syncthreads();
    h[t] = v;
    __syncthreads();
  }
  const T nxt = t < 255 ? h[t + 1] : T(0);
  if (h[t] >= need && nxt < need) {
    s_d = t;
    s_above = nxt;
  }
  __syncthreads();
  *above = s_above;
  return s_d;
}

// Last-block election: every thread's global writes are fenced before the counter increments.
__device__ bool last_block(SampWork* w) {
  __shared__ int s_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(&w->done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (s_last) __threadfence();
  return s_last;
}

__device__ __forceinline__ float key_to_float(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__global__ void __launch_bounds__(kST) k_samp_prep(SampArgs a) {
  __shared__ unsigned int h[256];
  __shared__ unsigned long long wb[kST / 32];
  SampWork* w = a.work;
  const int t = threadIdx.x;
  h[t] = 0;
  pdl_wait();
  const samp::StepParams p = w->p;
  const bool topk = !p.greedy && p.top_k > 0;
  __syncthreads();
  unsigned long long best = 0;
  const int base = blockIdx.x * kSChunk + t * kSPer;
#pragma unroll
  for (int j = 0; j < kSPer; ++j) {
    const int i = base + j;
    if (i >= a.V) break;
    float v = samp::adjust_logit(a.logits[i], a.table[i], p);
    if (a.mask && !((a.mask[i >> 5] >> (i & 31)) & 1u)) v = __int_as_float(0xff800000);  // -inf
    a.adj[i] = v;
    const uint32_t k = samp::key_of(v);
    best = max(best, (static_cast<unsigned long long>(k) << 32) | ~static_cast<uint32_t>(i));
    if (topk) atomicAdd(&h[k >> 24], 1u);
  }
  best = warp_max_u64(best);
  if ((t & 31) == 0) wb[t >> 5] = best;
  __syncthreads();
  if (t == 0) {
    for (int i = 1; i < kST / 32; ++i) best = max(best, wb[i]);
    atomicMax(&w->best, best);
  }
  if (topk && h[t]) atomicAdd(&w->hcnt[t], h[t]);
  if (!last_block(w)) return;
  const unsigned long long b = __ldcg(&w->best);
  const float mx = key_to_float(uint32_t(b >> 32));
  const bool draw = !p.greedy && isfinite(mx);
  if (t == 0) {
    w->mx = mx;
    w->thr_m = samp::min_p_threshold(mx, p);
    w->thr = 0;
    w->mode = (draw ? 1u : 0u) | (draw && topk ? 2u : 0u) | (draw && p.top_p < 1.0f ? 4u : 0u);
    w->done = 0;
  }
  if (topk) {
    h[t] = __ldcg(&w->hcnt[t]);
    w->hcnt[t] = 0;
    __syncthreads();
    unsigned int above;
    const int d = find_digit<unsigned int>(h, static_cast<unsigned int>(p.top_k), &above);
    if (t == 0) {
      w->kprefix = uint32_t(d);
      w->krem = uint32_t(p.top_k) - above;
    }
  }
}

template <int R>
__global__ void __launch_bounds__(kST) k_samp_topk(SampArgs a) {
  __shared__ unsigned int h[256];
  SampWork* w = a.work;
  const int t = threadIdx.x;
  pdl_wait();
  if (!(w->mode & 2u)) return;
  h[t] = 0;
  const uint32_t prefix = w->kprefix;
  constexpr int shift = 32 - 8 * R;
  __syncthreads();
  const int base = blockIdx.x * kSChunk + t * kSPer;
#pragma unroll
  for (int j = 0; j < kSPer; ++j) {
    const int i = base + j;
    if (i >= a.V) break;
    const uint32_t k = samp::key_of(a.adj[i]);
    if ((k >> shift) == prefix) atomicAdd(&h[(k >> (shift - 8)) & 255u], 1u);
  }
  __syncthreads();
  if (h[t]) atomicAdd(&w->hcnt[t], h[t]);
  if (!last_block(w)) return;
  h[t] = __ldcg(&w->hcnt[t]);
  w->hcnt[t] = 0;
  __syncthreads();
  unsigned int above;
  const int d = find_digit<unsigned int>(h, w->krem, &above);
  if (t == 0) {
    w->krem -= above;
    w->kprefix = (prefix << 8) | uint32_t(d);
    if (R == 3) w->thr = w->kprefix;
    w->done = 0;
  }
}

template <int R>
__global__ void __launch_bounds__(kST) k_samp_topp(SampArgs a) {
  __shared__ unsigned long long h[256];
  SampWork* w = a.work;
  const int t = threadIdx.x;
  pdl_wait();
  if (!(w->mode & 4u)) return;
  h[t] = 0;
  const uint32_t thr = w->thr, prefix = w->pprefix;
  const float thr_m = w->thr_m, mx = w->mx, inv_temp = w->p.inv_temp;
  constexpr int shift = 32 - 8 * R;
  __syncthreads();
  const int base = blockIdx.x * kSChunk + t * kSPer;
#pragma unroll
  for (int j = 0; j < kSPer; ++j) {
    const int i = base + j;
    if (i >= a.V) break;
    const float v = a.adj[i];
    const uint32_t k = samp::key_of(v);
    if (k >= thr && v >= thr_m && (R == 0 || (k >> shift) == prefix)) {
      const unsigned long long W = samp::weight_of(v, mx, inv_temp);
      if (W) atomicAdd(&h[(k >> (shift - 8)) & 255u], W);
    }
  }
  __syncthreads();
  if (h[t]) atomicAdd(&w->hmass[t], h[t]);
  if (!last_block(w)) return;
  __shared__ unsigned long long s_need;
  h[t] = __ldcg(&w->hmass[t]);
  w->hmass[t] = 0;
  __syncthreads();
  if (R == 0) {
    __shared__ unsigned long long wsum[kST / 32];
    const unsigned long long s = warp_sum_u64(h[t]);
    if ((t & 31) == 0) wsum[t >> 5] = s;
    __syncthreads();
    if (t == 0) {
      unsigned long long z = 0;
      for (int i = 0; i < kST / 32; ++i) z += wsum[i];
      w->P = samp::top_p_target(w->p.top_p, z);
      w->pabove = 0;
      s_need = w->P;
    }
  } else if (t == 0) {
    s_need = w->P - w->pabove;
  }
  __syncthreads();
  unsigned long long above;
  const int d = find_digit<unsigned long long>(h, s_need, &above);
  if (t == 0) {
    w->pabove += above;
    w->pprefix = R == 0 ? uint32_t(d) : (prefix << 8) | uint32_t(d);
    if (R == 3) w->thr = max(w->thr, w->pprefix);
    w->done = 0;
  }
}

__global__ void __launch_bounds__(kST) k_samp_draw(SampArgs a) {
  __shared__ unsigned long long sm[kST];
  __shared__ unsigned long long wsum[kST / 32];
  __shared__ int s_id;
  __shared__ int s_blk;
  __shared__ unsigned long long s_rel;
  SampWork* w = a.work;
  const int t = threadIdx.x;
  pdl_wait();
  const bool draw = w->mode & 1u;
  const uint32_t thr = w->thr;
  const float thr_m = w->thr_m, mx = w->mx, inv_temp = w->p.inv_temp;
  auto cand_w = [&](int i) -> unsigned long long {
    if (i >= a.V) return 0ull;
    const float v = a.adj[i];
    return samp::key_of(v) >= thr && v >= thr_m ? samp::weight_of(v, mx, inv_temp) : 0ull;
  };
  if (draw) {
    unsigned long long s = 0;
    const int base = blockIdx.x * kSChunk + t * kSPer;
#pragma unroll
    for (int j = 0; j < kSPer; ++j) s += cand_w(base + j);
    s = warp_sum_u64(s);
    if ((t & 31) == 0) wsum[t >> 5] = s;
    __syncthreads();
    if (t == 0) {
      for (int i = 1; i < kST / 32; ++i) s += wsum[i];
      w->chunk[blockIdx.x] = s;
    }
  }
  if (!last_block(w)) return;
  if (t == 0) s_id = int(~uint32_t(__ldcg(&w->best) & 0xffffffffu));  // greedy / fallback: the argmax
  if (draw) {
    // Block sums -> inclusive prefix (thread t owns blocks 2t, 2t+1).
    const int nb = gridDim.x;
    const unsigned long long c0 = 2 * t < nb ? __ldcg(&w->chunk[2 * t]) : 0ull;
    const unsigned long long c1 = 2 * t + 1 < nb ? __ldcg(&w->chunk[2 * t + 1]) : 0ull;
    const unsigned long long inc = block_scan_u64(c0 + c1, sm);
    if (t == kST - 1) {
      const unsigned long long z = inc;
      s_rel = samp::scale_draw(z, samp::philox64(w->p.seed, w->step));
      s_blk = -1;
    }
    __syncthreads();
    const unsigned long long target = s_rel, ex = inc - c0 - c1;
    __syncthreads();
    if (ex <= target && target < ex + c0) {
      s_blk = 2 * t;
      s_rel = target - ex;
    } else if (ex + c0 <= target && target < inc) {
      s_blk = 2 * t + 1;
      s_rel = target - ex - c0;
    }
    __syncthreads();
    if (s_blk >= 0) {
      const unsigned long long rel = s_rel;
      const int base = s_blk * kSChunk + t * kSPer;
      unsigned long long wv[kSPer], ts = 0;
#pragma unroll
      for (int j = 0; j < kSPer; ++j) {
        wv[j] = cand_w(base + j);
        ts += wv[j];
      }
      const unsigned long long tinc = block_scan_u64(ts, sm);
      unsigned long long acc = tinc - ts;
      if (acc <= rel && rel < tinc) {
#pragma unroll
        for (int j = 0; j < kSPer; ++j) {
          acc += wv[j];
          if (acc > rel) {
            s_id = base + j;
            break;
          }
        }
      }
    }
    __syncthreads();
  }
  __syncthreads();
  if (t == 0) {
    const int id = s_id;
    StepCtl* ctl = a.ctl;
    const int cur = ctl->cursor;
    a.out_ids[cur] = id;
    if (cur + 1 >= ctl->n_given) a.in_ids[cur + 1] = id;
    if (a.host_ids) {
      *reinterpret_cast<volatile int32_t*>(a.host_ids + cur) = id;
      __threadfence_system();
    }
    ctl->cursor = cur + 1;
    ctl->pos = ctl->pos + 1;
    a.table[id] += 1u;
    w->step += 1;
    w->best = 0;
    w->done = 0;
  }
}

__global__ void k_samp_init(SampWork* w, samp::StepParams p, unsigned long long step) {
  const int t = threadIdx.x;
  if (t < 256) {
    w->hcnt[t] = 0;
    w->hmass[t] = 0;
  }
  if (t == 0) {
    w->p = p;
    w->step = step;
    w->best = 0;
    w->done = 0;
    w->mode = 0;
  }
}

}  // namespace

void samp_init(SampWork* w, const samp::StepParams& params, uint64_t step, cudaStream_t s) {
  k_samp_init<<<1, 256, 0, s>>>(w, params, static_cast<unsigned long long>(step));
  LILY_CUDA_CHECK(cudaGetLastError());
}

void sample_step(const SampArgs& a, cudaStream_t s, bool pdl, bool pdl_first) {
  const int nb = (a.V + kSChunk - 1) / kSChunk;
  if (nb > kSMaxBlocks) throw std::runtime_error("cuda sampler: vocabulary too large");
  launch(k_samp_prep, dim3(nb), dim3(kST), 0, s, pdl && pdl_first, a);
  launch(k_samp_topk<1>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topk<2>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topk<3>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topp<0>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topp<1>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topp<2>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_topp<3>, dim3(nb), dim3(kST), 0, s, pdl, a);
  launch(k_samp_draw, dim3(nb), dim3(kST), 0, s, pdl, a);
}

}  // namespace lily::cuda
