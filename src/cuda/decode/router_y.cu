// Router-from-y (the decode default; LILY_CUDA_ROUTER_Y=0 keeps the router's own rows): the MoE router input is rmsnorm(h) * nw with h = x + O y (x: the layer's
// input residual, O: the mixer's output projection, y: its input), so the router logits are
//   r(h) * (W_r diag(nw) x + M y),  M = W_r diag(nw) O,
// and the top-k does not depend on the positive factor r(h). A = W_r diag(nw) x (int16 rows of W_r diag(nw)) is dotted
// with the raw x by blocks of the DeltaNet step's launch (GdnArgs::ra_*) or as side rows of the input projection's
// GEMV (q/k/v of the attention layers), B = M y as side rows of the
// out projection's GEMV (GemvSide), and the fused MoE kernel starts with the sum's top-k (MoeArgs::pre). This file
// makes M (and the int16 rows of A) once at load: W_r (and the shared-expert gate row) times nw and O dequantised to
// f32, one f32 matrix product, rows stored as int16 with a per-row scale (max |row| -> 32767: each entry rounded by
// at most half a step, 2^-16 of the row's largest, where f16's 11 significant bits left up to 2^-12 of the entry).
#include "cuda/common/cuda_check.h"
#include "cuda/common/device_util.cuh"
#include "cuda/decode/router_y.h"

namespace lily::cuda {
namespace {

// out[(row0 + r) * cols + c] = m[r, c] * (colscale ? colscale[c] : 1)
__global__ void k_dequant(const DMat m, const float* colscale, float* out, int row0) {
  const int64_t n = int64_t(m.rows) * m.cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / m.cols;
    const int c = int(i - r * m.cols);
    out[(row0 + r) * m.cols + c] = dmat_at(m, m.w, m.sb, r, c) * (colscale ? colscale[c] : 1.f);
  }
}

// C[M][N] = A[M][K] B[K][N], row-major f32, 32 x 32 tiles (load time only).
constexpr int kT = 32;
__global__ void __launch_bounds__(kT * 8) k_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
  __shared__ float As[kT][kT + 1], Bs[kT][kT + 1];
  const int tx = threadIdx.x % kT, ty = threadIdx.x / kT;  // 32 x 8 threads, 4 outputs each
  const int row0 = blockIdx.y * kT, col = blockIdx.x * kT + tx;
  float acc[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k0 = 0; k0 < K; k0 += kT) {
    for (int i = ty; i < kT; i += 8) {
      const int ar = row0 + i, ak = k0 + tx, bk = k0 + i;
      As[i][tx] = ar < M && ak < K ? A[int64_t(ar) * K + ak] : 0.f;
      Bs[i][tx] = bk < K && col < N ? B[int64_t(bk) * N + col] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kT; ++k) {
      const float b = Bs[k][tx];
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[j] = fmaf(As[ty + 8 * j][k], b, acc[j]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = row0 + ty + 8 * j;
    if (r < M && col < N) C[int64_t(r) * N + col] = acc[j];
  }
}

// One block per row: rscale[r] = max |C[r]| / 32767 (1 for a zero row), m[r][c] = int16(rint(C[r][c] / rscale[r])).
__global__ void k_rows_i16(const float* C, int N, uint16_t* m, float* rscale) {
  __shared__ unsigned smax;  // max |C[r]| as its bits (non-negative floats order as unsigned integers)
  const float* row = C + int64_t(blockIdx.x) * N;
  float mx = 0.f;
  for (int c = threadIdx.x; c < N; c += blockDim.x) mx = fmaxf(mx, fabsf(row[c]));
  if (threadIdx.x == 0) smax = 0u;
  __syncthreads();
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) atomicMax(&smax, __float_as_uint(mx));
  __syncthreads();
  mx = __uint_as_float(smax);
  const float s = mx > 0.f ? mx / 32767.f : 1.f;
  for (int c = threadIdx.x; c < N; c += blockDim.x) {
    const float v = fminf(fmaxf(rintf(row[c] / s), -32767.f), 32767.f);  // the division may round past the max
    m[int64_t(blockIdx.x) * N + c] = uint16_t(int16_t(v));
  }
  if (threadIdx.x == 0) rscale[blockIdx.x] = s;
}

}  // namespace

size_t compose_router_scratch_floats(int E, int H, int N) {
  return size_t(E + 1) * H + size_t(H) * N + size_t(E + 1) * N;
}

void compose_router(const DMat& router, const DMat& shg, const float* nw, const DMat& O, uint16_t* m, float* rscale,
                    float* scratch, cudaStream_t s, uint16_t* a_m, float* a_rscale) {
  const int E = router.rows, H = router.cols, N = O.cols;
  if (shg.rows != 1 || shg.cols != H || O.rows != H)
    throw Error("router-from-y: router [E, H], shared gate [1, H] and out_proj [H, N] do not fit together");
  float* wr = scratch;                   // [E + 1][H]
  float* o = wr + size_t(E + 1) * H;     // [H][N]
  float* c = o + size_t(H) * N;          // [E + 1][N]
  k_dequant<<<1024, 256, 0, s>>>(router, nw, wr, 0);
  k_dequant<<<64, 256, 0, s>>>(shg, nw, wr, E);
  if (a_m) k_rows_i16<<<E + 1, 256, 0, s>>>(wr, H, a_m, a_rscale);
  k_dequant<<<4096, 256, 0, s>>>(O, nullptr, o, 0);
  k_matmul<<<dim3((N + kT - 1) / kT, (E + 1 + kT - 1) / kT), kT * 8, 0, s>>>(wr, o, c, E + 1, N, H);
  k_rows_i16<<<E + 1, 256, 0, s>>>(c, N, m, rscale);
  LILY_CUDA_CHECK(cudaGetLastError());
}

}  // namespace lily::cuda
