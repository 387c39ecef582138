// Gated DeltaNet over a chunk, the chunked (WY / UT-transform) form of the delta rule: prefill_gdn runs it instead
// of the sequential scan when prefill_gdn_uses_chunked (GdnChunkArgs::chunked, LILY_CUDA_GDN_CHUNKED=1); conv,
// ring and norm stay in prefill_gdn.cu. The f32 SIMT kernels here are the slow reference; with
// GdnChunkArgs::chunked_tc (LILY_CUDA_GDN_CHUNKED=tc) the tensor-core kernels of prefill_gdn_chunked_tc.cu run. ref::gdn_chunked in src/cpu/gdn_chunked.* is its CPU oracle and
// derivation: per value head, chunks of C = kGdnChunk tokens, M = the stored [Dv][Dk] state, G = cumulative
// log decay within the chunk (summed in double, g floored at -200).
//  k_prep, grid (chunk, head), all chunks at once (nothing here depends on the incoming state):
//    A[t][s] = beta_t (k_t.k_s) exp(G_t - G_s) (s < t),  P[t][s] = (q_t.k_s) exp(G_t - G_s) (s <= t),
//    [W | U] = (I + A)^-1 diag(beta) [K * exp(G) | V] by forward substitution (one thread per column),
//    eg_t = exp(G_t), ed_t = exp(G_last - G_t), eL = exp(G_last).
//  k_cscan, grid (head, Dv / 32), sequential over chunks, its 32 rows of M in registers (fp32):
//    D = U - W M^T,  O = (Q * eg) M^T + P D,  M <- eL M + D^T (K * ed).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/prefill.h"
#include "cuda/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kC = kGdnChunk;  // 64: the k_prep A/P tiles and the k_cscan thread map assume it
static_assert(kC == 64, "k_prep / k_cscan thread maps are written for 64-token chunks");
constexpr int kPrepThreads = 256, kCsRB = 32, kCsThreads = 256;

struct WsPtrs {
  float *W, *U, *P, *E, *eL;  // W [Hv][np][Dk], U [Hv][np][Dv], P [Hv][np][C], E [Hv][np][2], eL [Hv][nc]
};
__host__ __device__ inline WsPtrs ws_ptrs(float* ws, int n, int Hv, int Dk, int Dv) {
  const int nc = (n + kC - 1) / kC;
  const int64_t np = int64_t(nc) * kC;
  WsPtrs w;
  w.W = ws;
  w.U = w.W + int64_t(Hv) * np * Dk;
  w.P = w.U + int64_t(Hv) * np * Dv;
  w.E = w.P + int64_t(Hv) * np * kC;
  w.eL = w.E + int64_t(Hv) * np * 2;
  return w;
}

size_t prep_smem(int Dk, int Dv) {
  return sizeof(double) * kC + sizeof(float) * (size_t(kC) + 2 * size_t(kC) * (Dk + 1) + size_t(kC) * (Dk + Dv) +
                                                 size_t(kC) * (kC + 1));
}
size_t cscan_smem(int Dk) {
  return sizeof(float) * (3 * size_t(kC) * (Dk + 1) + size_t(kC) * (kC + 1) + size_t(kC) * kCsRB +
                          size_t(kC) * (kCsRB + 1) + size_t(kCsRB) * (Dk + 1));
}

__global__ void __launch_bounds__(kPrepThreads) k_prep(const GdnChunkArgs g) {
  extern __shared__ __align__(16) unsigned char smraw[];
  const int Dk = g.Dk, Dv = g.Dv, Hv = g.Hv, DX = Dk + Dv;
  double* G = reinterpret_cast<double*>(smraw);
  float* sb = reinterpret_cast<float*>(G + kC);
  float* Ks = sb + kC;                  // [C][Dk+1]
  float* Qs = Ks + kC * (Dk + 1);       // [C][Dk+1]
  float* X = Qs + kC * (Dk + 1);        // [C][Dk+Dv]
  float* As = X + kC * DX;              // [C][C+1]
  const int c = blockIdx.x, j = blockIdx.y, c0 = c * kC, L = min(kC, g.n - c0);
  const int hk = j / (Hv / g.Hk), key_dim = g.Hk * Dk, cd = 2 * key_dim + Hv * Dv, vd = Hv * Dv;
  const int nc = (g.n + kC - 1) / kC;
  const int64_t np = int64_t(nc) * kC;
  const WsPtrs w = ws_ptrs(g.ws, g.n, Hv, Dk, Dv);
  const int tid = threadIdx.x;
  for (int i = tid; i < kC * Dk; i += blockDim.x) {
    const int t = i / Dk, d = i % Dk;
    const float* row = g.cbuf + int64_t(c0 + t) * cd;
    Ks[t * (Dk + 1) + d] = t < L ? row[key_dim + hk * Dk + d] : 0.f;
    Qs[t * (Dk + 1) + d] = t < L ? row[hk * Dk + d] : 0.f;
  }
  if (tid == 0) {  // beta and the cumulative log decay (double)
    const float dtb = g.dt_bias[j], an = g.a_neg[j];
    double acc = 0;
    for (int t = 0; t < kC; ++t) {
      if (t < L) {
        const float* pr = g.proj + int64_t(c0 + t) * g.ldp + cd + vd;
        sb[t] = 1.f / (1.f + expf(-pr[j]));
        const float xa = pr[Hv + j] + dtb;
        const float sp = xa > 20.f ? xa : log1pf(expf(xa));
        acc += fmax(double(an * sp), -200.0);
      } else {
        sb[t] = 0.f;
      }
      G[t] = acc;
    }
  }
  __syncthreads();
  // right-hand sides: beta_t [k_t exp(G_t) | v_t] (zero rows past L)
  for (int i = tid; i < kC * DX; i += blockDim.x) {
    const int t = i / DX, x = i % DX;
    float val = 0.f;
    if (t < L) {
      if (x < Dk) val = sb[t] * float(exp(G[t])) * Ks[t * (Dk + 1) + x];
      else val = sb[t] * g.cbuf[int64_t(c0 + t) * cd + 2 * key_dim + j * Dv + (x - Dk)];
    }
    X[t * DX + x] = val;
  }
  {  // A and P: 4x4 tiles, rows t = tt + 16a, cols s = ss + 16b
    const int tt = tid >> 4, ss = tid & 15;
    float a_kk[4][4] = {}, a_qk[4][4] = {};
    for (int d = 0; d < Dk; ++d) {
      float kt[4], qt[4], ks[4];
#pragma unroll
      for (int a = 0; a < 4; ++a) {
        kt[a] = Ks[(tt + 16 * a) * (Dk + 1) + d];
        qt[a] = Qs[(tt + 16 * a) * (Dk + 1) + d];
        ks[a] = Ks[(ss + 16 * a) * (Dk + 1) + d];
      }
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          a_kk[a][b] = fmaf(kt[a], ks[b], a_kk[a][b]);
          a_qk[a][b] = fmaf(qt[a], ks[b], a_qk[a][b]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int t = tt + 16 * a, s = ss + 16 * b;
        const float e = (s <= t && t < L) ? float(exp(G[t] - G[s])) : 0.f;
        As[t * (kC + 1) + s] = s < t ? sb[t] * a_kk[a][b] * e : 0.f;
        w.P[(int64_t(j) * np + c0 + t) * kC + s] = a_qk[a][b] * e;
      }
  }
  __syncthreads();
  // forward substitution, one column per thread: X[t] -= sum_{s<t} A[t][s] X[s]
  for (int x = tid; x < DX; x += blockDim.x) {
    for (int t = 1; t < L; ++t) {
      const float* ar = As + t * (kC + 1);
      float p0 = 0.f, p1 = 0.f, p2 = 0.f, p3 = 0.f;
      int s = 0;
      for (; s + 4 <= t; s += 4) {
        p0 = fmaf(ar[s], X[s * DX + x], p0);
        p1 = fmaf(ar[s + 1], X[(s + 1) * DX + x], p1);
        p2 = fmaf(ar[s + 2], X[(s + 2) * DX + x], p2);
        p3 = fmaf(ar[s + 3], X[(s + 3) * DX + x], p3);
      }
      for (; s < t; ++s) p0 = fmaf(ar[s], X[s * DX + x], p0);
      X[t * DX + x] -= (p0 + p1) + (p2 + p3);
    }
  }
  __syncthreads();
  for (int i = tid; i < kC * Dk; i += blockDim.x) {
    const int t = i / Dk, d = i % Dk;
    w.W[(int64_t(j) * np + c0 + t) * Dk + d] = X[t * DX + d];
  }
  for (int i = tid; i < kC * Dv; i += blockDim.x) {
    const int t = i / Dv, r = i % Dv;
    w.U[(int64_t(j) * np + c0 + t) * Dv + r] = X[t * DX + Dk + r];
  }
  if (tid < kC) {
    const int t = tid;
    const double GL = G[L - 1];
    w.E[(int64_t(j) * np + c0 + t) * 2] = t < L ? float(exp(G[t])) : 0.f;
    w.E[(int64_t(j) * np + c0 + t) * 2 + 1] = t < L ? float(exp(GL - G[t])) : 0.f;
    if (t == 0) w.eL[int64_t(j) * nc + c] = float(exp(GL));
  }
}

// Thread map: tr = tid % 16, tt = tid / 16. Outputs over (t, r): t = tt + 16a (a < 4), r = tr + 16b (b < 2).
// State: this thread keeps M[r_b][tt + 16e] (e < DK/16) in registers.
template <int DK>
__global__ void __launch_bounds__(kCsThreads) k_cscan(const GdnChunkArgs g) {
  constexpr int NE = DK / 16, LD = DK + 1;
  extern __shared__ __align__(16) unsigned char smraw[];
  float* Ws = reinterpret_cast<float*>(smraw);  // [C][LD]
  float* Qg = Ws + kC * LD;                       // [C][LD]  q_t * eg_t
  float* Kd = Qg + kC * LD;                       // [C][LD]  k_t * ed_t
  float* Ps = Kd + kC * LD;                       // [C][C+1]
  float* Us = Ps + kC * (kC + 1);                 // [C][RB]
  float* Ds = Us + kC * kCsRB;                    // [C][RB+1]
  float* Ms = Ds + kC * (kCsRB + 1);              // [RB][LD]
  const int j = blockIdx.x, v0 = blockIdx.y * kCsRB;
  const int Hv = g.Hv, Dv = g.Dv, hk = j / (Hv / g.Hk), key_dim = g.Hk * DK, vd = Hv * Dv;
  const int cd = 2 * key_dim + vd, nc = (g.n + kC - 1) / kC;
  const int64_t np = int64_t(nc) * kC;
  const WsPtrs w = ws_ptrs(g.ws, g.n, Hv, DK, Dv);
  const int tid = threadIdx.x, tr = tid & 15, tt = tid >> 4;
  float* S = g.S + int64_t(j) * Dv * DK;
  float m[2][NE];
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int e = 0; e < NE; ++e) {
      const int r = tr + 16 * b, v = v0 + r, d = tt + 16 * e;
      m[b][e] = v < Dv ? S[int64_t(v) * DK + d] : 0.f;
      Ms[r * LD + d] = m[b][e];
    }
  for (int c = 0; c < nc; ++c) {
    const int c0 = c * kC, L = min(kC, g.n - c0);
    const int64_t rb = int64_t(j) * np + c0;  // this chunk's first row in W/U/P/E
    for (int i = tid; i < kC * DK; i += kCsThreads) {
      const int t = i / DK, d = i % DK;
      Ws[t * LD + d] = w.W[(rb + t) * DK + d];
      float q = 0.f, k = 0.f;
      if (t < L) {
        const float* row = g.cbuf + int64_t(c0 + t) * cd;
        q = row[hk * DK + d] * w.E[(rb + t) * 2];
        k = row[key_dim + hk * DK + d] * w.E[(rb + t) * 2 + 1];
      }
      Qg[t * LD + d] = q;
      Kd[t * LD + d] = k;
    }
    for (int i = tid; i < kC * kC; i += kCsThreads) Ps[(i / kC) * (kC + 1) + i % kC] = w.P[rb * kC + i];
    for (int i = tid; i < kC * kCsRB; i += kCsThreads) {
      const int t = i / kCsRB, r = i % kCsRB;
      Us[i] = v0 + r < Dv ? w.U[(rb + t) * Dv + v0 + r] : 0.f;
    }
    const float eL = w.eL[int64_t(j) * nc + c];
    __syncthreads();
    float aw[4][2] = {}, aq[4][2] = {};
#pragma unroll 4
    for (int d = 0; d < DK; ++d) {
      float wt[4], qt[4], mr[2];
#pragma unroll
      for (int a = 0; a < 4; ++a) { wt[a] = Ws[(tt + 16 * a) * LD + d]; qt[a] = Qg[(tt + 16 * a) * LD + d]; }
#pragma unroll
      for (int b = 0; b < 2; ++b) mr[b] = Ms[(tr + 16 * b) * LD + d];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          aw[a][b] = fmaf(wt[a], mr[b], aw[a][b]);
          aq[a][b] = fmaf(qt[a], mr[b], aq[a][b]);
        }
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int t = tt + 16 * a, r = tr + 16 * b;
        Ds[t * (kCsRB + 1) + r] = Us[t * kCsRB + r] - aw[a][b];
      }
    __syncthreads();
    // O = (Q * eg) M^T + P D
#pragma unroll 4
    for (int s = 0; s < kC; ++s) {
      float pt[4], dr[2];
#pragma unroll
      for (int a = 0; a < 4; ++a) pt[a] = Ps[(tt + 16 * a) * (kC + 1) + s];
#pragma unroll
      for (int b = 0; b < 2; ++b) dr[b] = Ds[s * (kCsRB + 1) + tr + 16 * b];
#pragma unroll
      for (int a = 0; a < 4; ++a)
#pragma unroll
        for (int b = 0; b < 2; ++b) aq[a][b] = fmaf(pt[a], dr[b], aq[a][b]);
    }
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int b = 0; b < 2; ++b) {
        const int t = tt + 16 * a, v = v0 + tr + 16 * b;
        if (t < L && v < Dv) g.obuf[int64_t(c0 + t) * vd + j * Dv + v] = aq[a][b];
      }
    // M <- eL M + D^T (K * ed)
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int e = 0; e < NE; ++e) m[b][e] *= eL;
#pragma unroll 4
    for (int t = 0; t < kC; ++t) {
      float dr[2], kr[NE];
#pragma unroll
      for (int b = 0; b < 2; ++b) dr[b] = Ds[t * (kCsRB + 1) + tr + 16 * b];
#pragma unroll
      for (int e = 0; e < NE; ++e) kr[e] = Kd[t * LD + tt + 16 * e];
#pragma unroll
      for (int b = 0; b < 2; ++b)
#pragma unroll
        for (int e = 0; e < NE; ++e) m[b][e] = fmaf(dr[b], kr[e], m[b][e]);
    }
    __syncthreads();
#pragma unroll
    for (int b = 0; b < 2; ++b)
#pragma unroll
      for (int e = 0; e < NE; ++e) Ms[(tr + 16 * b) * LD + tt + 16 * e] = m[b][e];
  }
#pragma unroll
  for (int b = 0; b < 2; ++b)
#pragma unroll
    for (int e = 0; e < NE; ++e) {
      const int v = v0 + tr + 16 * b;
      if (v < Dv) S[int64_t(v) * DK + tt + 16 * e] = m[b][e];
    }
}


template <int DK>
void launch_cscan(const GdnChunkArgs& g, cudaStream_t s) {
  const size_t sm = cscan_smem(DK);
  static bool set = false;
  if (!set) {
    LILY_CUDA_CHECK(cudaFuncSetAttribute(k_cscan<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm)));
    set = true;
  }
  k_cscan<DK><<<dim3(g.Hv, (g.Dv + kCsRB - 1) / kCsRB), kCsThreads, sm, s>>>(g);
}

}  // namespace

int gdn_smem_optin() {
  static const int v = [] {
    int dev = 0, x = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&x, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
    return x;
  }();
  return v;
}

size_t prefill_gdn_ws_floats(int n, int Hv, int Dk, int Dv) {
  const size_t nc = size_t((n + kC - 1) / kC), np = nc * kC;
  const size_t simt = size_t(Hv) * (np * (size_t(Dk) + Dv + kC + 2) + nc);
  return std::max(simt, prefill_gdn_tc_ws_floats(n, Hv, Dk, Dv));
}

bool prefill_gdn_uses_chunked(const GdnChunkArgs& g) {
  if (!g.chunked || !g.ws || g.n < g.chunked_min_n || g.Dk % 32 || g.Dk > 128) return false;
  if (g.chunked_tc) return prefill_gdn_tc_supported(g);
  const size_t need = std::max(prep_smem(g.Dk, g.Dv), cscan_smem(g.Dk));
  return need <= size_t(gdn_smem_optin());
}

void prefill_gdn_chunked_scan(const GdnChunkArgs& g, cudaStream_t s) {
  if (g.chunked_tc) {
    prefill_gdn_chunked_scan_tc(g, s);
    return;
  }
  const size_t sm = prep_smem(g.Dk, g.Dv);
  static size_t set = 0;
  if (sm > set) {
    LILY_CUDA_CHECK(cudaFuncSetAttribute(k_prep, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sm)));
    set = sm;
  }
  k_prep<<<dim3((g.n + kC - 1) / kC, g.Hv), kPrepThreads, sm, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
  switch (g.Dk / 32) {
    case 1: launch_cscan<32>(g, s); break;
    case 2: launch_cscan<64>(g, s); break;
    case 3: launch_cscan<96>(g, s); break;
    default: launch_cscan<128>(g, s); break;
  }
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
