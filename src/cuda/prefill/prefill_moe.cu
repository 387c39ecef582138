// Prefill row kernels and MoE routing on the device (no host sync inside a layer):
//  k_embed: dequantised embedding rows; k_rmsnorm_bf16: RMSNorm to bf16 GEMM input;
//  k_topk: one warp per token, softmax top-k (ties -> lower index, weights = softmax over the selected logits),
//    histogram of rows per expert; k_scan: one block, prefix scan of the counts to row offsets and the tile map
//    of the grouped GEMM (kGemmTileM rows per tile); k_scatter: (token, choice) -> expert-sorted row;
//  k_combine: residual += sigmoid-gated shared expert + routing-weighted gather-sum of the expert rows.
#include <cfloat>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kMaxE = 512, kMaxK = 16;

__global__ void k_embed(const DMat E, const int32_t* ids, float* x) {
  const int t = blockIdx.x;
  const int64_t row = ids[t];
  const int H = E.cols;
  float* o = x + int64_t(t) * H;
  for (int k = threadIdx.x; k < H; k += blockDim.x) o[k] = dmat_at(E, E.w, E.sb, row, k);
}

__global__ void k_rmsnorm_bf16(const float* x, int ldx, const float* w, int H, float eps, uint16_t* out) {
  __shared__ float red[32];
  const int t = blockIdx.x;
  const float* xr = x + int64_t(t) * ldx;
  float ss = 0.f;
  for (int i = threadIdx.x; i < H; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss, red);
  const float r = rsqrtf(ss / float(H) + eps);
  for (int i = threadIdx.x; i < H; i += blockDim.x) out[int64_t(t) * H + i] = f2bf(xr[i] * r * w[i]);
}

__global__ void k_topk(const RouteArgs a) {
  const int lane = threadIdx.x & 31;
  const int t = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= a.n) return;
  const float* lg = a.logits + int64_t(t) * a.E;
  // NaN logits rank as -inf and a chosen expert is masked out (not overwritten), so every round picks a distinct
  // index < E whatever the logits hold (k <= E is checked at load): a broken activation gives NaN outputs, never
  // an out-of-range expert.
  float v[kMaxE / 32];
  uint32_t taken = 0;
#pragma unroll
  for (int i = 0; i < kMaxE / 32; ++i) {
    const int e = lane + 32 * i;
    const float x = e < a.E ? lg[e] : -INFINITY;
    v[i] = x == x ? x : -INFINITY;
  }
  float top0 = 0.f, wsum = 0.f, wj = 0.f;
  int myidx = 0;
  for (int j = 0; j < a.k; ++j) {
    float bv = -INFINITY;
    int bi = 0x7fffffff;
#pragma unroll
    for (int i = 0; i < kMaxE / 32; ++i) {
      const int e = lane + 32 * i;
      if (e < a.E && !(taken >> i & 1u) && (v[i] > bv || (v[i] == bv && e < bi))) { bv = v[i]; bi = e; }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
    }
    if (j == 0) top0 = bv;
#pragma unroll
    for (int i = 0; i < kMaxE / 32; ++i)
      if (lane + 32 * i == bi) taken |= 1u << i;
    const float wv = __expf(bv - top0);
    wsum += wv;
    if (lane == j) { wj = wv; myidx = bi; }
  }
  if (lane < a.k) {
    a.idx[int64_t(t) * a.k + lane] = myidx;
    a.w[int64_t(t) * a.k + lane] = wj / wsum;
    atomicAdd(&a.counts[myidx], 1);
  }
}

// One block of 512 threads: offsets, tile map, scatter cursors.
__global__ void __launch_bounds__(512) k_scan(const RouteArgs a) {
  __shared__ int s_off[kMaxE + 1], s_toff[kMaxE + 1];
  const int e = threadIdx.x;
  const int cnt = e < a.E ? a.counts[e] : 0;
  const int nt = (cnt + a.tile_m - 1) / a.tile_m;
  // inclusive scans (Hillis-Steele, 512 entries)
  s_off[e + 1] = cnt;
  s_toff[e + 1] = nt;
  if (e == 0) { s_off[0] = 0; s_toff[0] = 0; }
  __syncthreads();
  for (int d = 1; d < kMaxE; d <<= 1) {
    const int i = e + 1;
    const int a0 = i - d >= 1 ? s_off[i - d] : 0, b0 = i - d >= 1 ? s_toff[i - d] : 0;
    __syncthreads();
    s_off[i] += a0;
    s_toff[i] += b0;
    __syncthreads();
  }
  if (e < a.E) {
    const int r = s_off[e], tb = s_toff[e];
    a.fill[e] = r;
    for (int i = 0; i < nt; ++i) {
      int32_t* tt = a.tiles + 3 * (tb + i);
      tt[0] = e;
      tt[1] = r + int(int64_t(i) * cnt / nt);  // balanced: every tile of an expert has the same work +- 1 row
      tt[2] = r + int(int64_t(i + 1) * cnt / nt);
    }
  }
  if (e == 0) *a.n_tiles = s_toff[a.E];
}

__global__ void k_scatter(const RouteArgs a) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= a.n * a.k) return;
  const int p = atomicAdd(&a.fill[a.idx[i]], 1);
  a.row_token[p] = i / a.k;
  a.slot_row[i] = p;
}

__global__ void k_combine(float* x, const float* sh, const float* sg, int ld_sg, const float* y, const float* w,
                          const int32_t* slot_row, int k, int H) {
  __shared__ float s_w[kMaxK];
  __shared__ int64_t s_r[kMaxK];
  const int t = blockIdx.x;
  if (threadIdx.x < k) {
    s_w[threadIdx.x] = w[int64_t(t) * k + threadIdx.x];
    s_r[threadIdx.x] = int64_t(slot_row[int64_t(t) * k + threadIdx.x]) * H;
  }
  __syncthreads();
  const float gs = sigmoid_f(sg[int64_t(t) * ld_sg]);
  for (int i = threadIdx.x; i < H; i += blockDim.x) {
    float acc = gs * sh[int64_t(t) * H + i];
    for (int j = 0; j < k; ++j) acc += s_w[j] * y[s_r[j] + i];
    x[int64_t(t) * H + i] += acc;
  }
}

}  // namespace

void prefill_embed(const DMat& E, const int32_t* ids, int n, float* x, cudaStream_t s) {
  if (n <= 0) return;
  k_embed<<<n, 256, 0, s>>>(E, ids, x);
  LILY_CUDA_CHECK_LAUNCH();
}

void prefill_rmsnorm_bf16(const float* x, int ldx, const float* w, int n, int H, float eps, uint16_t* out,
                          cudaStream_t s) {
  if (n <= 0) return;
  k_rmsnorm_bf16<<<n, 256, 0, s>>>(x, ldx, w, H, eps, out);
  LILY_CUDA_CHECK_LAUNCH();
}

void prefill_route(const RouteArgs& r, cudaStream_t s) {
  if (r.E > kMaxE || r.k > kMaxK || r.k > 32 || r.k < 1) throw Error("prefill_route: unsupported experts / top-k");
  if (r.tile_m != kGemmTileM && r.tile_m != kGemmTileMBig) throw Error("prefill_route: tile rows must be 64 or 128");
  if (r.max_tiles < (r.n * r.k + kGemmTileM - 1) / kGemmTileM + r.E) throw Error("prefill_route: tile map too small");
  LILY_CUDA_CHECK(cudaMemsetAsync(r.counts, 0, size_t(r.E) * 4, s));
  k_topk<<<(r.n + 7) / 8, 256, 0, s>>>(r);
  LILY_CUDA_CHECK_LAUNCH();
  k_scan<<<1, 512, 0, s>>>(r);
  LILY_CUDA_CHECK_LAUNCH();
  k_scatter<<<(r.n * r.k + 255) / 256, 256, 0, s>>>(r);
  LILY_CUDA_CHECK_LAUNCH();
}

void prefill_moe_combine(float* x, const float* sh, const float* sg, int ld_sg, const float* y, const float* w,
                         const int32_t* slot_row, int n, int k, int H, cudaStream_t s) {
  if (n <= 0) return;
  k_combine<<<n, 256, 0, s>>>(x, sh, sg, ld_sg, y, w, slot_row, k, H);
  LILY_CUDA_CHECK_LAUNCH();
}

}  // namespace lily::cuda
