// Prefill GEMM on Hopper's warpgroup MMA (k_gemm_wg, GemmArgs::kernel = kGemmKernelWG, the default there): the
// same arguments, tiles, W dequantisation and epilogue as k_gemm_v2 (prefill_gemm.cu), with wgmma reading both
// operands from shared memory instead of ldmatrix + mma.sync. This file is compiled for sm_90a only (CMake
// target lilycuda_sm90a); prefill_gemm_wg_available() probes at run time that the device runs its code.
// Block: 256 threads = 2 warpgroups, tile BM x 128 x 64 (k). BM = 128: warpgroup g computes rows 64g.. x all
// 128 columns (m64n128k16); BM = 64: both take rows 0..63, warpgroup g columns 64g.. (m64n64k16).
// Shared memory: kStages stages of {A [BM][64], (split: A low parts [BM][64],) W [128][64]}, 16-bit, 128-byte
// swizzle (wgmma.cuh); 3 stages, 2 for split with BM = 128 (two blocks per SM in every case: 97 KiB).
// Step kt (stage P = kt % kStages):
//   wait for A(kt) (cp.async), proxy fence, barrier -> A(kt), W(kt) visible to wgmma; every warpgroup has waited
//                                                     for its wgmma of step kt-1, so that stage is free
//   issue 4 wgmma on stage P (asynchronous; split: 8, hi then lo part of each k16 step on the same W)
//   cp.async A(kt + kStages - 1) into the freed stage; dequantise W(kt+1) (registers -> stage (kt+1) % kStages);
//   load W(kt+1+kWSets) into the freed register set        (all of this overlaps the tensor cores)
//   wait for the wgmma
// Operands bf16, fp16, or split (A = scale * (hi + lo), two fp16 wgmma per k16 step: k_gemm_v2's split form).
#include <cuda_runtime.h>

#include <type_traits>

#include "cuda/common/cuda_check.h"
#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_gemm_tiles.cuh"
#include "cuda/prefill/prefill_util.cuh"
#include "cuda/prefill/wgmma.cuh"

namespace lily::cuda {
namespace {

// 3 stages; 2 for split 128-row tiles, so that two blocks fit an SM (3 stages at one block per SM measured slower:
// docs/performance-log.md)
template <int BM, int PREC>
constexpr int wg_stages() {
  return PREC == kPrecSplit && BM == 128 ? 2 : 3;
}
template <int BM, int PREC>
constexpr int wg_stage_bytes() {
  return BM * 128 * (PREC == kPrecSplit ? 2 : 1) + kBN * 128;
}
template <int BM, int PREC>
constexpr int wg_smem_bytes() {
  return wg_stages<BM, PREC>() * wg_stage_bytes<BM, PREC>() + 1024;  // + alignment slack (1024-aligned tiles)
}

__global__ void k_wg_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
template <int N, int PREC>
__device__ __forceinline__ void wg_mma(float (&d)[N / 2], uint64_t da, uint64_t db) {
  if constexpr (N == 128 && PREC == kPrecBF16) wgmma_n128_bf(d, da, db);
  else if constexpr (N == 128) wgmma_n128_h(d, da, db);
  else if constexpr (PREC == kPrecBF16) wgmma_n64_bf(d, da, db);
  else wgmma_n64_h(d, da, db);
}

// Epilogue: the warpgroup's accumulators (rows rw0 + 16 warp + l/4 (+8), tile columns cn0 + 8j + 2 (l%4) + q)
// times the row scale to C / Cb per MODE. kGemmSiluMul: tile column n is W row n of the block: 32 jj + x (x < 16)
// is gate output column 16 jj + x, 32 jj + 16 + x the up row of the same column.
template <int N, int MODE, int PREC>
__device__ __forceinline__ void wg_store(const GemmArgs& g, const float (&d)[N / 2], int r0, int r1, int rw0,
                                         int cn0) {
  const int lane = threadIdx.x & 31, w = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    const int r = r0 + rw0 + 16 * w + (lane >> 2) + 8 * hh;
    if (r >= r1) continue;
    const float rs = row_scale<PREC>(g, r);
#pragma unroll
    for (int j = 0; j < N / 8; ++j) {
      const int n = cn0 + 8 * j + 2 * (lane & 3);  // tile column of d[4j + 2hh]
      if constexpr (MODE == kGemmSiluMul) {
        if ((j & 2) == 0) {  // gate block; its up block is j + 2
          const int c = col_tile(g) * 64 + (n >> 5) * 16 + (n & 15);
#pragma unroll
          for (int q = 0; q < 2; ++q)
            if (c + q < g.W0.rows)
              put_out<MODE>(g, r, c + q, d[4 * j + 2 * hh + q] * rs, d[4 * (j + 2) + 2 * hh + q] * rs);
        }
      } else {
        const int c = col_tile(g) * kBN + n;
#pragma unroll
        for (int q = 0; q < 2; ++q)
          if (c + q < g.W0.rows) put_out<MODE>(g, r, c + q, d[4 * j + 2 * hh + q] * rs, 0.f);
      }
    }
  }
}
#endif

template <int BM, int MODE, int FMT, int PREC>
__global__ void __launch_bounds__(kThreads, 2) k_gemm_wg(const GemmArgs g) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int N = BM == 128 ? 128 : 64;  // wgmma N per warpgroup
  constexpr int kWSets = FMT == kBF16 ? 1 : 2;
  constexpr bool kSplit = PREC == kPrecSplit;
  constexpr int kStages = wg_stages<BM, PREC>();
  // A hi [BM][64] | split: A lo [BM][64] | W [128][64] per stage
  constexpr uint32_t kABytes = BM * 128, kWOff = kABytes * (kSplit ? 2 : 1);
  constexpr uint32_t kStageBytes = wg_stage_bytes<BM, PREC>();
  extern __shared__ uint4 smem_u4[];
  const uint32_t base = (smem_addr(smem_u4) + 1023u) & ~1023u;
  const int tid = threadIdx.x, wg = tid >> 7;

  int64_t e;
  int r0, r1;
  if (!block_rows(g, BM, e, r0, r1)) return;
  const int KT = g.W0.cols / kBK;

  BTile<FMT, PREC> wt[kWSets];
#pragma unroll
  for (int i = 0; i < kWSets; ++i) bind_w_row<MODE>(wt[i], g, e);

  // A tile (rows r0.., clamped to r1 - 1, gathered through a_rows) of k-tile kt into stage s: one commit group.
  // Thread tid copies chunk tid % 8 of rows tid / 8 + 32 j: their sources are resolved once; in the swizzled tile
  // those pieces sit 32 rows = 4096 bytes apart (row % 8 is the same for all j).
  constexpr int kAP = BM * 8 / kThreads;
  const uint16_t* a_src[kAP];
#pragma unroll
  for (int j = 0; j < kAP; ++j) {
    int gr = min(r0 + (tid >> 3) + 32 * j, r1 - 1);
    if (g.a_rows) gr = g.a_rows[gr];
    a_src[j] = g.A + int64_t(gr) * g.lda + (tid & 7) * 8;
  }
  const uint32_t a_dst = sw128(tid >> 3, tid & 7);
  auto load_a = [&](int s, int kt) {
    if (kt < KT) {
      const uint32_t sa = base + s * kStageBytes + a_dst;
#pragma unroll
      for (int j = 0; j < kAP; ++j) cp_async16_s(sa + j * 4096, a_src[j] + kt * kBK);
      if constexpr (kSplit) {
#pragma unroll
        for (int j = 0; j < kAP; ++j) cp_async16_s(sa + kABytes + j * 4096, g.A_lo + (a_src[j] - g.A) + kt * kBK);
      }
    }
    cp_commit();
  };
  // this thread's 32 dequantised weights (tile row tid / 2, chunks 4 (tid % 2) ..) into stage s
  auto store_w = [&](const BTile<FMT, PREC>& t, int s) {
    uint4 v[4];
    t.dequant(v);
    const uint32_t sb = base + s * kStageBytes + kWOff;
    const int r = tid >> 1, c0 = (tid & 1) * 4;
#pragma unroll
    for (int i = 0; i < 4; ++i) st_shared_u4(sb + sw128(r, c0 + i), v[i]);
  };

  float acc[N / 2];
#pragma unroll
  for (int i = 0; i < N / 2; ++i) acc[i] = 0.f;

  // prologue: A(0 .. kStages-2) in flight, W(0) in shared memory, W(1 .. kWSets) in registers
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) load_a(s, s);
  wt[0].load(0);
  store_w(wt[0], 0);
#pragma unroll
  for (int t = 1; t <= kWSets; ++t)
    if (t < KT) wt[t % kWSets].load(t * kBK);

  const uint32_t a_off = BM == 128 ? wg * 64 * 128 : 0, b_off = kWOff + (BM == 128 ? 0 : wg * 64 * 128);
  auto step = [&](auto parity, int kt) {
    constexpr int S = (decltype(parity)::value + 1) % kWSets;  // the register set of W(kt+1)
    const int P = kt % kStages;
    cp_wait<kStages - 2>();
    fence_proxy_async();
    __syncthreads();
    const uint32_t st = base + P * kStageBytes;
    const uint64_t da = wg_desc(st + a_off), db = wg_desc(st + b_off);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      wg_mma<N, PREC>(acc, da + 2 * kk, db + 2 * kk);  // +32 bytes per k16
      if constexpr (kSplit) wg_mma<N, PREC>(acc, da + (kABytes >> 4) + 2 * kk, db + 2 * kk);  // the low parts
    }
    wg_commit();
    load_a((kt + kStages - 1) % kStages, kt + kStages - 1);
    if (kt + 1 < KT) {
      store_w(wt[S], (kt + 1) % kStages);
      if (kt + 1 + kWSets < KT) wt[S].load((kt + 1 + kWSets) * kBK);
    }
    wg_wait<0>();
    wg_reg_fence(acc);
  };
  for (int kt = 0; kt < KT; kt += 2) {
    step(std::integral_constant<int, 0>(), kt);
    if (kt + 1 < KT) step(std::integral_constant<int, 1>(), kt + 1);
  }
  wg_store<N, MODE, PREC>(g, acc, r0, r1, BM == 128 ? wg * 64 : 0, BM == 128 ? 0 : wg * 64);
#endif
}

template <int BM, int MODE, int FMT, int PREC>
void launch_wg(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  constexpr int smem = wg_smem_bytes<BM, PREC>();
  static bool once = [] {
    LILY_CUDA_CHECK(
        cudaFuncSetAttribute(k_gemm_wg<BM, MODE, FMT, PREC>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    return true;
  }();
  (void)once;
  k_gemm_wg<BM, MODE, FMT, PREC><<<grid, kThreads, smem, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

template <int BM, int MODE, int PREC>
void wg_fmt(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  switch (g.W0.fmt) {
    case kQ4: launch_wg<BM, MODE, kQ4, PREC>(g, grid, s); break;
    case kQ4Z: launch_wg<BM, MODE, kQ4Z, PREC>(g, grid, s); break;
    case kQ4H: launch_wg<BM, MODE, kQ4H, PREC>(g, grid, s); break;
    case kQ8: launch_wg<BM, MODE, kQ8, PREC>(g, grid, s); break;
    case kQ8H: launch_wg<BM, MODE, kQ8H, PREC>(g, grid, s); break;
    case kF8: launch_wg<BM, MODE, kF8, PREC>(g, grid, s); break;
    case kI8: launch_wg<BM, MODE, kI8, PREC>(g, grid, s); break;
    case kQ6: launch_wg<BM, MODE, kQ6, PREC>(g, grid, s); break;
    case kBF16: launch_wg<BM, MODE, kBF16, PREC>(g, grid, s); break;
    default: throw Error("prefill_gemm_wg: unknown weight format");
  }
}

template <int BM, int MODE>
void wg_prec(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  if (g.prec == kPrecBF16) wg_fmt<BM, MODE, kPrecBF16>(g, grid, s);
  else if (g.prec == kPrecSplit) wg_fmt<BM, MODE, kPrecSplit>(g, grid, s);
  else wg_fmt<BM, MODE, kPrecFP16>(g, grid, s);
}

template <int BM>
void wg_mode(const GemmArgs& g, int mode, dim3 grid, cudaStream_t s) {
  if (mode == kGemmStore) wg_prec<BM, kGemmStore>(g, grid, s);
  else if (mode == kGemmAdd) wg_prec<BM, kGemmAdd>(g, grid, s);
  else wg_prec<BM, kGemmSiluMul>(g, grid, s);
}

}  // namespace

bool prefill_gemm_wg_available() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, k_wg_probe) != cudaSuccess) {
      (void)cudaGetLastError();  // no sm_90a image for this device: not an error of the caller's
      return false;
    }
    int* d = nullptr;
    int h = 0;
    LILY_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
    k_wg_probe<<<1, 1>>>(d);
    LILY_CUDA_CHECK_LAUNCH();
    LILY_CUDA_CHECK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    LILY_CUDA_CHECK(cudaFree(d));
    return h == 1;
  }();
  return ok;
}

void prefill_gemm_wg(const GemmArgs& g, int mode, int bm, dim3 grid, cudaStream_t s) {
  if (g.prec != kPrecBF16 && g.prec != kPrecFP16 && g.prec != kPrecSplit)
    throw Error("prefill_gemm_wg: bad precision");
  if (bm == 128) wg_mode<128>(g, mode, grid, s);
  else if (bm == 64) wg_mode<64>(g, mode, grid, s);
  else throw Error("prefill_gemm_wg: tile rows must be 64 or 128");
}

}  // namespace lily::cuda
