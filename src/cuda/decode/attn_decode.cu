// Gated full-attention decode step (one token, one layer), GQA-packed and split over the KV positions.
// Grid (kAttnSplits, nkv), 8 warps. Each block: q/k RMSNorm + partial NeoX RoPE of the G = nq/nkv query heads of
// its kv head (and of the new k), KV append at pos (split 0 writes), then its slice of positions: each warp
// streams K/V rows (lane owns hd/32 dims, all G heads at once, so each KV row is read once for the G heads),
// online softmax in exp2 space; warps merge in shared memory; splits merge through `part` (counters in StepCtl):
// by default every split block waits for its kv head's others and writes its share of the merged output with the
// sigmoid output gate (merge_slice); AttnArgs::merge_levels 2 / 1 (tests, and 2 where the split blocks cannot all be
// resident): the last block of each group of kAttnGroup splits, then the last group (or the last block of all splits)
// merges.
#include <type_traits>

#include "cuda/common/device_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kWarps = 8;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kNegBig = -1e30f;

// RMSNorm (weight w) + NeoX rope on the first rope_dim dims of one head held in shared memory x[HD], by one warp;
// w, rc, rs in shared memory (rc/rs: cos/sin of the rope angles at this position, rope_dim/2 each). Lane l holds
// dims l + 32 i in registers (all loads in flight at once); where rope_dim/2 is 32, 64, 96 or 128 a rope pair lies
// in one lane, else the pairs go through shared memory.
template <int HD>
__device__ __forceinline__ void norm_rope_warp(float* x, const float* w, int rope_dim, const float* rc, const float* rs,
                                               float eps, float scale) {
  constexpr int N = HD / 32;
  static_assert(HD % 32 == 0, "whole lanes per head");
  const int lane = threadIdx.x & 31;
  float v[N];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = x[lane + 32 * i];
    ss += v[i] * v[i];
  }
  ss = warp_sum(ss);
  const float r = rsqrtf(ss / float(HD) + eps);
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] *= r * w[lane + 32 * i];
  const int half = rope_dim / 2;
  bool done = false;  // rope pairs in registers where half is 32, 64, 96 or 128 (this model: 32)
  auto regs = [&](auto hp) {
    constexpr int HP = decltype(hp)::value;
    if constexpr (2 * HP <= N) {
      if (half == 32 * HP) {
#pragma unroll
        for (int i = 0; i < HP; ++i) {
          const float c = rc[lane + 32 * i], sn = rs[lane + 32 * i], lo = v[i], hi = v[i + HP];
          v[i] = lo * c - hi * sn;
          v[i + HP] = hi * c + lo * sn;
        }
        done = true;
      }
    }
  };
  regs(std::integral_constant<int, 1>{});
  regs(std::integral_constant<int, 2>{});
  regs(std::integral_constant<int, 3>{});
  regs(std::integral_constant<int, 4>{});
  if (!done && half > 0) {  // other rope sizes: the pairs through shared memory
#pragma unroll
    for (int i = 0; i < N; ++i) x[lane + 32 * i] = v[i];
    __syncwarp();
    for (int j = lane; j < half; j += 32) {
      const float a = x[j], b = x[j + half];
      x[j] = a * rc[j] - b * rs[j];
      x[j + half] = b * rc[j] + a * rs[j];
    }
    __syncwarp();
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = x[lane + 32 * i];
  }
#pragma unroll
  for (int i = 0; i < N; ++i) x[lane + 32 * i] = v[i] * scale;
  __syncwarp();
}

// One lane's DPL fp16 of a K or V row, loaded raw (so that several rows can be in flight) and unpacked later.
template <int DPL> struct KvRaw;
template <> struct KvRaw<8> {
  uint4 v;
  __device__ __forceinline__ void load(const uint16_t* p) { v = ldg_stream(p); }
  __device__ __forceinline__ void unpack(float (&f)[8]) const {
    kv2f2(v.x, f[0], f[1]); kv2f2(v.y, f[2], f[3]); kv2f2(v.z, f[4], f[5]); kv2f2(v.w, f[6], f[7]);
  }
};
template <> struct KvRaw<4> {
  uint2 v;
  __device__ __forceinline__ void load(const uint16_t* p) { v = __ldg(reinterpret_cast<const uint2*>(p)); }
  __device__ __forceinline__ void unpack(float (&f)[4]) const { kv2f2(v.x, f[0], f[1]); kv2f2(v.y, f[2], f[3]); }
};
template <> struct KvRaw<2> {
  unsigned int v;
  __device__ __forceinline__ void load(const uint16_t* p) { v = __ldg(reinterpret_cast<const unsigned int*>(p)); }
  __device__ __forceinline__ void unpack(float (&f)[2]) const { kv2f2(v, f[0], f[1]); }
};

constexpr int kDefaultMinSplit = 64;  // positions per split at least (fewer splits -> a cheaper last-block merge; more -> more
                       // blocks and fewer positions per warp)
// K/V rows per warp loaded before any is used: 6 (234 registers; 32K +0.5% over 4, 4K the same); 8, all of a
// 64-position split, measured -1.4% at 252 registers (docs/performance-log.md). Loads roll: each row's successor is
// requested as soon as the row is consumed.
constexpr int kKvInFlight = 6;

// Merge weights of n partials of one kv head (pk + s * stride: acc [G*HD] relative to m, then m [G], l [G]): one
// warp per head, lanes over the splits, all (m, l) loads in flight; wsp [n][G] = 2^(m_s - M) (divided by the
// denominator when dst == null; else dst gets the merged m and l: a group of the two-level merge). Starts with a
// barrier (every thread done with the shared memory wsp reuses); the caller syncs before reading wsp.
template <int HD, int G>
__device__ __forceinline__ void merge_weights(const float* pk, int n, int stride, float* wsp, float* dst) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  static_assert(kAttnSplits % 32 == 0 && kAttnSplits <= kWarps * HD, "merge weights must fit in the slabs");
  for (int g = warp; g < G; g += kWarps) {
    constexpr int SPL = kAttnSplits / 32;
    float ms[SPL], ls[SPL];
    float mx = kNegBig;
#pragma unroll
    for (int i = 0; i < SPL; ++i) {
      const int s = lane + 32 * i;
      ms[i] = s < n ? __ldcg(pk + s * stride + G * HD + g) : kNegBig;
      ls[i] = s < n ? __ldcg(pk + s * stride + G * HD + G + g) : 0.f;
      mx = fmaxf(mx, ms[i]);
    }
    mx = warp_max(mx);
    float den = 0.f;
#pragma unroll
    for (int i = 0; i < SPL; ++i) {
      ms[i] = lane + 32 * i < n ? exp2f(ms[i] - mx) : 0.f;
      den += ls[i] * ms[i];
    }
    den = warp_sum(den);
    const float inv = dst ? 1.f : 1.f / den;
#pragma unroll
    for (int i = 0; i < SPL; ++i)
      if (lane + 32 * i < n) wsp[(lane + 32 * i) * G + g] = ms[i] * inv;
    if (dst && lane == 0) {
      dst[G * HD + g] = mx;
      dst[G * HD + G + g] = den;
    }
  }
}

// Merges n partials of one kv head (layout as merge_weights): then each thread sums 4 consecutive outputs over the
// splits, MU splits' loads in flight at a time.
// dst != null: writes the merged partial there (acc relative to the new max, m, l: a group of the two-level merge);
// dst == null: writes the normalised output times the sigmoid gate to a.out. Starts and ends with a barrier.
template <int HD, int G, int MU>
__device__ __forceinline__ void merge_parts(const AttnArgs& a, const float* pk, int n, int stride, float* wsp, int kvh,
                                            float* dst) {
  merge_weights<HD, G>(pk, n, stride, wsp, dst);
  __syncthreads();
  for (int i4 = threadIdx.x; i4 < G * HD / 4; i4 += blockDim.x) {
    const int i = i4 * 4, g = i / HD, d = i % HD;
    const int h = kvh * G + g;
    float4 gt = make_float4(0.f, 0.f, 0.f, 0.f);
    if (!dst) gt = *reinterpret_cast<const float4*>(a.q + h * 2 * HD + HD + d);  // the gate's load first
    float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s = 0; s < n; s += MU) {
      float4 v[MU];
#pragma unroll
      for (int u = 0; u < MU; ++u)
        v[u] = s + u < n ? __ldcg(reinterpret_cast<const float4*>(pk + (s + u) * stride + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int u = 0; u < MU; ++u) {
        const float f = s + u < n ? wsp[(s + u) * G + g] : 0.f;
        num.x += v[u].x * f; num.y += v[u].y * f; num.z += v[u].z * f; num.w += v[u].w * f;
      }
    }
    if (dst)
      *reinterpret_cast<float4*>(dst + i) = num;
    else
      *reinterpret_cast<float4*>(a.out + h * HD + d) = make_float4(num.x * sigmoid_f(gt.x), num.y * sigmoid_f(gt.y),
                                                                   num.z * sigmoid_f(gt.z), num.w * sigmoid_f(gt.w));
  }
  __syncthreads();
}

// One-level merge spread over the n split blocks of a kv head (merge_levels 0): block `slice` writes its share of
// the G*HD/4 float4 outputs, T threads per output (a power of two <= 32) each summing every T-th split, then a
// butterfly over the T lanes. Its first output's partial values and gate are loaded before the weights' (m, l),
// so both L2 round trips overlap. Every block computes all the weights (n x G, tiny).
template <int HD, int G>
__device__ __forceinline__ void merge_slice(const AttnArgs& a, const float* pk, int n, int stride, int slice,
                                            float* wsp, int kvh, bool trl) {
  constexpr int NO = G * HD / 4, kT = kWarps * 32, kSpt = 4;  // outputs; threads; splits held per thread
  const int O = (NO + n - 1) / n, o0 = slice * O;
  if (o0 >= NO) return;  // uniform over the block
  int T = 32;
  while (T > 1 && T * O > kT) T >>= 1;
  const int sub = int(threadIdx.x) % T;
  auto load = [&](int oi, float4 (&v)[kSpt], float4& gt) {
    const int i = (o0 + oi) * 4, g = i / HD, d = i % HD;
    gt = *reinterpret_cast<const float4*>(a.q + (kvh * G + g) * 2 * HD + HD + d);
#pragma unroll
    for (int u = 0; u < kSpt; ++u) {
      const int sp = sub + u * T;
      v[u] = sp < n ? __ldcg(reinterpret_cast<const float4*>(pk + sp * stride + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  const int lane = threadIdx.x & 31, first = int(threadIdx.x) / T, step = kT / T;
  const int hi = min(O, NO - o0);
  float4 v[kSpt], gt;
  if (first < hi) load(first, v, gt);
  merge_weights<HD, G>(pk, n, stride, wsp, nullptr);
  __syncthreads();
  if (trl) trace_at(a.trace, 10);
  // warp-uniform trip count (the butterfly's shuffles need every lane of the warp)
  for (int oi0 = (int(threadIdx.x) >> 5) * (32 / T); oi0 < hi; oi0 += step) {
    const int oi = oi0 + lane / T;
    const bool valid = oi < hi;
    if (valid && oi != first) load(oi, v, gt);
    const int i = (o0 + (valid ? oi : 0)) * 4, g = i / HD, d = i % HD;
    float4 num = make_float4(0.f, 0.f, 0.f, 0.f);
    if (valid) {
#pragma unroll
      for (int u = 0; u < kSpt; ++u) {
        const int sp = sub + u * T;
        const float f = sp < n ? wsp[sp * G + g] : 0.f;
        num.x += v[u].x * f; num.y += v[u].y * f; num.z += v[u].z * f; num.w += v[u].w * f;
      }
      for (int sp = sub + kSpt * T; sp < n; sp += T) {  // more than kSpt splits per thread (not at 64 splits)
        const float4 w4 = __ldcg(reinterpret_cast<const float4*>(pk + sp * stride + i));
        const float f = wsp[sp * G + g];
        num.x += w4.x * f; num.y += w4.y * f; num.z += w4.z * f; num.w += w4.w * f;
      }
    }
    for (int o = T / 2; o >= 1; o >>= 1) {
      num.x += __shfl_xor_sync(0xffffffffu, num.x, o);
      num.y += __shfl_xor_sync(0xffffffffu, num.y, o);
      num.z += __shfl_xor_sync(0xffffffffu, num.z, o);
      num.w += __shfl_xor_sync(0xffffffffu, num.w, o);
    }
    if (valid && sub == 0)
      *reinterpret_cast<float4*>(a.out + (kvh * G + g) * HD + d) = make_float4(
          num.x * sigmoid_f(gt.x), num.y * sigmoid_f(gt.y), num.z * sigmoid_f(gt.z), num.w * sigmoid_f(gt.w));
    if (trl && oi0 == 0) trace_at(a.trace, 11);  // thread 0's first output summed
  }
}

template <int HD, int G>
__global__ void __launch_bounds__(kWarps * 32) k_attn(const AttnArgs a) {
  constexpr int DPL = HD / 32;
  __shared__ float qs[G][HD];
  __shared__ float kn[HD], vn[HD];
  __shared__ float wm[kWarps][G], wl[kWarps][G];
  __shared__ float rc[HD / 2], rs[HD / 2], qw[HD], kw[HD];
  __shared__ int s_last;
  const int kvh = blockIdx.y, split = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Before pdl_wait: ctl (pos) is written only by the previous step's lm_head, and the cached K/V rows < pos by
  // earlier steps, so the split and this warp's first K/V rows can be loaded while the previous kernel finishes.
  const bool tr = a.trace && threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.y == 0;
  if (tr) trace_at(a.trace, 0);
  StepCtl* ctl = a.ctl;
  const int pos = ctl->pos, max_ctx = ctl->max_ctx;
  const int T = pos + 1;
  // >= min_split positions per split, at most kAttnSplits splits: 4K context -> 64 splits x nkv blocks
  int nsplit = min(kAttnSplits, (T + a.min_split - 1) / a.min_split);
  const int chunk = (T + nsplit - 1) / nsplit;
  nsplit = (T + chunk - 1) / chunk;
  if (split >= nsplit) return;
  const int t0 = split * chunk, t1 = min(T, t0 + chunk);
  uint16_t* Kc = ctl->kv + ((int64_t(a.layer) * 2 + 0) * a.nkv + kvh) * int64_t(max_ctx) * HD;
  uint16_t* Vc = ctl->kv + ((int64_t(a.layer) * 2 + 1) * a.nkv + kvh) * int64_t(max_ctx) * HD;
  constexpr int U = kKvInFlight;
  KvRaw<DPL> kraw[U] = {}, vraw[U] = {};
  auto issue = [&](int tb) {  // rows tb, tb + kWarps, ... of this warp (the new row pos comes from kn/vn)
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int t = tb + u * kWarps;
      if (t < t1 && t < pos) {
        kraw[u].load(Kc + int64_t(t) * HD + lane * DPL);
        vraw[u].load(Vc + int64_t(t) * HD + lane * DPL);
      }
    }
  };
  issue(t0 + warp);
  // the q/k norm weights into shared memory (read from global memory after the wait, each warp's strided loop paid
  // one L2 round trip per iteration: 2.5 us of the prologue)
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {
    qw[d] = a.q_norm[d];
    kw[d] = a.k_norm[d];
  }
  // RoPE angles of this position (double, as the reference), computed once per block while waiting
  for (int j = threadIdx.x; j < a.rope_dim / 2; j += blockDim.x) {
    const double ang = double(pos) * pow(a.theta, -2.0 * j / double(a.rope_dim));
    double sn, cs;
    sincos(ang, &sn, &cs);
    rc[j] = float(cs);
    rs[j] = float(sn);
  }
  pdl_wait();
  if (tr) trace_at(a.trace, 1);

  // q heads of this kv head, new k and v: all loads issued before any is stored (a strided loop with a runtime
  // bound issued them one round trip at a time: ~4 us)
  {
    constexpr int kT = kWarps * 32, QN = (G * HD + kT - 1) / kT, KN = (HD + kT - 1) / kT;
    float qv[QN], kv[KN], vv[KN];
#pragma unroll
    for (int u = 0; u < QN; ++u) {
      const int i = int(threadIdx.x) + u * kT;
      if (i < G * HD) qv[u] = a.q[(kvh * G + i / HD) * 2 * HD + i % HD];
    }
#pragma unroll
    for (int u = 0; u < KN; ++u) {
      const int d = int(threadIdx.x) + u * kT;
      if (d < HD) {
        kv[u] = a.k[kvh * HD + d];
        vv[u] = a.v[kvh * HD + d];
      }
    }
#pragma unroll
    for (int u = 0; u < QN; ++u) {
      const int i = int(threadIdx.x) + u * kT;
      if (i < G * HD) qs[i / HD][i % HD] = qv[u];
    }
#pragma unroll
    for (int u = 0; u < KN; ++u) {
      const int d = int(threadIdx.x) + u * kT;
      if (d < HD) {
        kn[d] = kv[u];
        vn[d] = vv[u];
      }
    }
  }
  __syncthreads();
  if (tr) trace_at(a.trace, 7);
  const float qscale = rsqrtf(float(HD)) * kLog2e;
  for (int g = warp; g < G + 1; g += kWarps) {
    if (g < G) norm_rope_warp<HD>(qs[g], qw, a.rope_dim, rc, rs, a.eps, qscale);
    else norm_rope_warp<HD>(kn, kw, a.rope_dim, rc, rs, a.eps, 1.f);
  }
  __syncthreads();
  if (tr) trace_at(a.trace, 8);
  for (int d = threadIdx.x; d < HD; d += blockDim.x) {  // the cache holds fp16: use the rounded values here too
    const uint16_t kb = f2kv(kn[d]), vb = f2kv(vn[d]);
    if (split == 0) { Kc[int64_t(pos) * HD + d] = kb; Vc[int64_t(pos) * HD + d] = vb; }
    kn[d] = kv2f(kb);
    vn[d] = kv2f(vb);
  }
  __syncthreads();
  if (tr) trace_at(a.trace, 2);

  // The online softmax state of head hg = lane / (32 / G) (the head whose score the transpose-reduce leaves in this
  // lane): each lane computes one head's two exp2 per position, not all G heads' (the MUFU pipe was the scan's
  // bottleneck), and the G factors reach every lane by shuffles.
  constexpr int LPH = 32 / G;  // lanes per head after the transpose-reduce
  float q[G][DPL], acc[G][DPL], mh = kNegBig, lh = 0.f;
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < DPL; ++e) { q[g][e] = qs[g][lane * DPL + e]; acc[g][e] = 0.f; }
  }
  for (int tb = t0 + warp; tb < t1; tb += U * kWarps) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
    const int t = tb + u * kWarps;
    if (t >= t1) break;  // warp-uniform
    float kr[DPL], vr[DPL];
    if (t < pos) {
      kraw[u].unpack(kr);
      vraw[u].unpack(vr);
      // rolling: the slot's next row (U * kWarps positions on) is requested as soon as this one is unpacked, so
      // its DRAM latency overlaps this round's math instead of following it
      const int tn = t + U * kWarps;
      if (tn < t1 && tn < pos) {
        kraw[u].load(Kc + int64_t(tn) * HD + lane * DPL);
        vraw[u].load(Vc + int64_t(tn) * HD + lane * DPL);
      }
    } else {
#pragma unroll
      for (int e = 0; e < DPL; ++e) { kr[e] = kn[lane * DPL + e]; vr[e] = vn[lane * DPL + e]; }
    }
    float sc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float s = 0.f;
#pragma unroll
      for (int e = 0; e < DPL; ++e) s = fmaf(q[g][e], kr[e], s);
      sc[g] = s;
    }
    // transpose-reduce: after log2(G) halving steps lane holds a partial of head g at lanes g*(32/G)..
#pragma unroll
    for (int n = G / 2, o = 16; n >= 1; n /= 2, o /= 2) {
      const bool up = (lane & o) != 0;
#pragma unroll
      for (int i = 0; i < n; ++i) {
        const float send = up ? sc[i] : sc[i + n];
        const float keep = up ? sc[i + n] : sc[i];
        sc[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
      }
    }
    float tot = sc[0];
#pragma unroll
    for (int o = 16 / G; o >= 1; o /= 2) tot += __shfl_xor_sync(0xffffffffu, tot, o);
    // most positions raise no head's running max: then the acc rescale (a factor of 1) is skipped, warp-uniformly
    const bool grow = tot > mh;
    const float mn = grow ? tot : mh;
    const float corr = exp2f(mh - mn), p = exp2f(tot - mn);
    mh = mn;
    lh = lh * corr + p;
    if (__any_sync(0xffffffffu, grow)) {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float cg = __shfl_sync(0xffffffffu, corr, g * LPH), pg = __shfl_sync(0xffffffffu, p, g * LPH);
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[g][e] = fmaf(acc[g][e], cg, pg * vr[e]);
      }
    } else {
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pg = __shfl_sync(0xffffffffu, p, g * LPH);
#pragma unroll
        for (int e = 0; e < DPL; ++e) acc[g][e] = fmaf(pg, vr[e], acc[g][e]);
      }
    }
    }
    if (tr && tb == t0) trace_at(a.trace, 9);
  }
  if (tr) trace_at(a.trace, 3);
  // merge warps
  if (lane % LPH == 0) {
    wm[warp][lane / LPH] = mh;
    wl[warp][lane / LPH] = lh;
  }
  __syncthreads();
  // the block's max per head in every thread; its denominator only where it is written (thread g < G): the
  // exp2 (16 per clock per SM) of all G x kWarps terms in every thread cost ~0.5 us
  float M[G];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    M[g] = kNegBig;
    for (int w = 0; w < kWarps; ++w) M[g] = fmaxf(M[g], wm[w][g]);
  }
  // every warp's rescaled partial into its slab of dynamic shared memory, then each thread sums the warps for
  // its outputs (one barrier; was kWarps serial read-modify-write rounds with a barrier each: ~10 us in the graph)
  extern __shared__ float4 slab4[];  // [kWarps][G * HD / 4]
  float* slab = reinterpret_cast<float*>(slab4);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const float f = exp2f(wm[warp][g] - M[g]);
    float* dst = slab + (warp * G + g) * HD + lane * DPL;
#pragma unroll
    for (int e = 0; e < DPL; ++e) dst[e] = acc[g][e] * f;
  }
  __syncthreads();
  // publish this split
  const int stride = G * HD + 2 * G;
  float* part = a.part + (int64_t(kvh) * kAttnPartSlots + split) * stride;
  for (int i4 = threadIdx.x; i4 < G * HD / 4; i4 += blockDim.x) {
    float4 t = slab4[i4];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) {
      const float4 u = slab4[w * (G * HD / 4) + i4];
      t.x += u.x; t.y += u.y; t.z += u.z; t.w += u.w;
    }
    reinterpret_cast<float4*>(part)[i4] = t;
  }
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mg = kNegBig, lg = 0.f;
    for (int w = 0; w < kWarps; ++w) mg = fmaxf(mg, wm[w][g]);
    for (int w = 0; w < kWarps; ++w) lg += wl[w][g] * exp2f(wm[w][g] - mg);
    part[G * HD + g] = mg;
    part[G * HD + G + g] = lg;
  }
  __threadfence();
  __syncthreads();
  pdl_trigger();  // o_proj may launch once this block has published its split
  if (tr) trace_at(a.trace, 4);
  if (a.merge_levels == 0) {  // every split block waits for all of its kv head's splits, then merges its share
    unsigned* done = &ctl->attn_done[kvh];
    unsigned* seen = &ctl->attn_gdone[kvh * (kAttnSplits / kAttnGroup)];
    if (threadIdx.x == 0) {
      atomicAdd(done, 1u);
      while (ld_acquire_u32(done) < unsigned(nsplit)) {
      }
    }
    __syncthreads();
    if (threadIdx.x == 32) count_past(done, seen, unsigned(nsplit));
    const bool trl = a.trace && threadIdx.x == 0 && kvh == 0 && split == 0;
    if (trl) trace_at(a.trace, 5);
    merge_slice<HD, G>(a, a.part + int64_t(kvh) * kAttnPartSlots * stride, nsplit, stride, split, slab, kvh, trl);
    if (trl) trace_at(a.trace, 6);
    return;
  }
  const bool two = a.merge_levels == 2 && nsplit > kAttnGroup;
  const int ngroup = (nsplit + kAttnGroup - 1) / kAttnGroup;
  const float* pk = a.part + int64_t(kvh) * kAttnPartSlots * stride;
  float* wsp = slab;  // reused for the merge weights [n][G] (n * G <= kWarps * G * HD) once every slab read is done
  if (two) {  // the last split of each group merges the group into slot kAttnSplits + group
    const int grp = split / kAttnGroup, gsz = min(kAttnGroup, nsplit - grp * kAttnGroup);
    if (threadIdx.x == 0)
      s_last = atomicAdd(&ctl->attn_gdone[kvh * (kAttnSplits / kAttnGroup) + grp], 1u) == unsigned(gsz - 1);
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    merge_parts<HD, G, kAttnGroup>(a, pk + grp * kAttnGroup * stride, gsz, stride, wsp, kvh,
                                   a.part + (int64_t(kvh) * kAttnPartSlots + kAttnSplits + grp) * stride);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
      ctl->attn_gdone[kvh * (kAttnSplits / kAttnGroup) + grp] = 0;
      s_last = atomicAdd(&ctl->attn_done[kvh], 1u) == unsigned(ngroup - 1);
    }
  } else if (threadIdx.x == 0) {
    s_last = atomicAdd(&ctl->attn_done[kvh], 1u) == unsigned(nsplit - 1);
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  const bool trl = a.trace && threadIdx.x == 0 && kvh == 0;
  if (trl) trace_at(a.trace, 5);
  // last block of this kv head: merge the splits (or the groups) and apply the gate
  if (two) merge_parts<HD, G, kAttnGroup>(a, pk + kAttnSplits * stride, ngroup, stride, wsp, kvh, nullptr);
  else merge_parts<HD, G, 32>(a, pk, nsplit, stride, wsp, kvh, nullptr);
  if (threadIdx.x == 0) ctl->attn_done[kvh] = 0;
  if (trl) trace_at(a.trace, 6);
}

}  // namespace

void attn_decode(const AttnArgs& args, cudaStream_t s, bool pdl) {
  AttnArgs a = args;
  a.min_split = kDefaultMinSplit;
  if (a.nkv < 1 || a.nkv > kAttnMaxKv || a.nq % a.nkv) throw Error("attn_decode: unsupported head counts");
  if (a.rope_dim > a.hd || a.rope_dim % 2) throw Error("attn_decode: rope_dim must be even and <= head_dim");
  const int G = a.nq / a.nkv;
  const dim3 grid(kAttnSplits, a.nkv), block(kWarps * 32);
  const size_t smem = size_t(kWarps) * G * a.hd * 4;  // per-warp partial slabs (64 KB at hd 256, G 8)
  auto run = [&](auto kern) {
    allow_smem(kern, smem);
    // the spread merge has every split block wait for its kv head's others: all must be resident at once
    if (a.merge_levels == 0 && resident_grid(kern, kWarps * 32, smem) < kAttnSplits * a.nkv) a.merge_levels = 2;
    launch(kern, grid, block, smem, s, pdl, a);
  };
  if (a.hd == 256 && G == 8) run(k_attn<256, 8>);
  else if (a.hd == 256 && G == 4) run(k_attn<256, 4>);
  else if (a.hd == 128 && G == 8) run(k_attn<128, 8>);
  else if (a.hd == 64 && G == 4) run(k_attn<64, 4>);
  else if (a.hd == 64 && G == 8) run(k_attn<64, 8>);
  else throw Error("attn_decode: head_dim " + std::to_string(a.hd) + " x group " + std::to_string(G) +
                   " not instantiated");
}

}  // namespace lily::cuda
