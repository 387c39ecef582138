// Prefill GEMM: C[r][c] = sum_k A[r][k] W[c][k] with A 16-bit operand rows and W in its device format (MLX
// affine 4/8-bit, 8-bit codes with f32 scales: e4m3 or int8, or bf16). Block tile BM x 128 x 64 (k), 8 warps (2 x 4), mma.sync m16n8k16 with f32
// accumulation; PREC (prefill.h PrefillPrec) picks bf16 or fp16 operands, kPrecSplit adds the fp16 low part of A
// (second A tile, second mma with the same W fragment). A tiles come in by cp.async (optionally gathered through
// a_rows), W tiles are read as packed words into registers one k-tile ahead, dequantised (s*q + b in f32, rounded
// to bf16 or saturating fp16) and stored to shared memory: weights are never expanded in global memory.
// Double-buffered shared memory. fp16 A rows carry a power-of-two scale, applied to the
// f32 accumulator in the epilogue. Dense mode tiles rows [0, M); grouped mode reads a device tile map
// {expert, r0, r1} (the MoE expert groups). kGemmSiluMul computes gate and up of the same 64 output columns in one
// tile (each warp: 16 gate + 16 up columns) and writes silu(gate) * up (bf16 to Cb, or f32 to C).
// k_gemm_v2 (the mma.sync kernel of every architecture without wgmma): one barrier per k-tile, quantised W two
// k-tiles ahead, W fragments loaded once per k-step for both split passes. Hopper runs k_gemm_wg
// (prefill_gemm_wg.cu) in every precision; k_gemm_simple (below) is the reference.
#include <string>
#include <type_traits>

#include "cuda/prefill/prefill.h"
#include "cuda/prefill/prefill_gemm_tiles.cuh"
#include "cuda/prefill/prefill_util.cuh"

namespace lily::cuda {
namespace {

// A tile [BM][64] (k0..k0+63) of rows r0.. (clamped to r1 - 1, gathered through a_rows) into as (kSplit: the low
// parts into al) by cp.async: BM * 8 16-byte pieces, one commit group.
template <int BM, bool kSplit>
__device__ __forceinline__ void load_a_tile(const GemmArgs& g, uint16_t* as, uint16_t* al, int r0, int r1, int k0) {
#pragma unroll
  for (int i = threadIdx.x; i < BM * 8; i += kThreads) {
    const int r = i >> 3, c = (i & 7) * 8;
    int gr = min(r0 + r, r1 - 1);
    if (g.a_rows) gr = g.a_rows[gr];
    cp_async16(as + r * kSK + c, g.A + int64_t(gr) * g.lda + k0 + c);
    if constexpr (kSplit) cp_async16(al + r * kSK + c, g.A_lo + int64_t(gr) * g.lda + k0 + c);
  }
  cp_commit();
}

// Epilogue: warp (wm, wn)'s accumulators acc[mi][ni] (rows wm * BM/2 + 16 mi.., n8 column block ni) times the
// row scale to C / Cb per MODE (kGemmSiluMul: ni 0,1 gate and ni 2,3 up of the warp's 16 columns).
template <int BM, int MODE, int PREC>
__device__ __forceinline__ void store_tile(const GemmArgs& g, const float (&acc)[BM / 32][4][4], int r0, int r1,
                                           int wm, int wn, int lane) {
  constexpr int WM = BM / 2, MI = WM / 16;
  const int gq = lane >> 2, cq = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r0 + wm * WM + mi * 16 + gq + 8 * hh;
      if (r >= r1) continue;
      const float rs = row_scale<PREC>(g, r);
      if constexpr (MODE == kGemmSiluMul) {
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int c = col_tile(g) * 64 + wn * 16 + ni * 8 + 2 * cq + q;
            if (c < g.W0.rows) put_out<MODE>(g, r, c, acc[mi][ni][2 * hh + q] * rs, acc[mi][ni + 2][2 * hh + q] * rs);
          }
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int c = col_tile(g) * kBN + wn * 32 + ni * 8 + 2 * cq + q;
            if (c < g.W0.rows) put_out<MODE>(g, r, c, acc[mi][ni][2 * hh + q] * rs, 0.f);
          }
        }
      }
    }
  }
}

template <int MI>
__device__ __forceinline__ void zero_acc(float (&acc)[MI][4][4]) {
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;
}

// ---- one barrier per k-tile, quantised W two k-tiles ahead, W fragments loaded once per k-step ----

// acc[0..3] += a (16x16) x the 16x32 W slice b[nj] (n8 blocks 2 nj, 2 nj + 1)
template <int PREC>
__device__ __forceinline__ void mma_a_x4(float (&acc)[4][4], const uint32_t (&a)[4], const uint32_t (&b)[2][4]) {
#pragma unroll
  for (int nj = 0; nj < 2; ++nj) {
    mma_op<PREC>(acc[2 * nj], a, b[nj][0], b[nj][1]);
    mma_op<PREC>(acc[2 * nj + 1], a, b[nj][2], b[nj][3]);
  }
}

// One 64-deep k-tile of a warp's (16 MI) x 32 output: as / al = the warp's first A row (hi / split lo parts),
// bs = its first W row, all [.][kSK]. Per 16-k step the four W fragments are loaded once and serve the hi and the
// lo pass; each accumulator sees hi(kk) then lo(kk), kk ascending.
template <int MI, int PREC>
__device__ __forceinline__ void warp_mma_ktile(float (&acc)[MI][4][4], const uint16_t* as, const uint16_t* al,
                                               const uint16_t* bs, int lane) {
  // this lane's ldmatrix row addresses (bytes, shared state space)
  const uint32_t a_s = smem_addr(as + (lane & 15) * kSK + (lane >> 4) * 8);
  const uint32_t l_s = smem_addr(al + (lane & 15) * kSK + (lane >> 4) * 8);
  const uint32_t b_s = smem_addr(bs + ((lane & 7) + (lane >> 4) * 8) * kSK + ((lane >> 3) & 1) * 8);
#pragma unroll
  for (int kk = 0; kk < kBK / 16; ++kk) {
    uint32_t b[2][4], a[MI][4];
#pragma unroll
    for (int nj = 0; nj < 2; ++nj) ldsm_x4_s(b[nj], b_s + 2 * (nj * 16 * kSK + kk * 16));
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) ldsm_x4_s(a[mi], a_s + 2 * (mi * 16 * kSK + kk * 16));
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) mma_a_x4<PREC>(acc[mi], a[mi], b);
    if constexpr (PREC == kPrecSplit) {
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) ldsm_x4_s(a[mi], l_s + 2 * (mi * 16 * kSK + kk * 16));
#pragma unroll
      for (int mi = 0; mi < MI; ++mi) mma_a_x4<PREC>(acc[mi], a[mi], b);
    }
  }
}

// Tiles of BM x kBN, 8 warps (2 x 4), double-buffered A and B in shared memory. Step kt (P = kt & 1):
//   wait for A(kt), barrier        -> A(kt) and B(kt) (buffers P) visible; every warp is done with step kt-1, so
//                                     buffers P^1 are free
//   cp.async A(kt+1) -> buffers P^1
//   MMA on buffers P
//   dequantise W(kt+1) from registers -> B buffer P^1; load W(kt+1+kWSets) into the freed register set
// W k-tile t lives in register set t % kWSets: with two sets (quantised W: 5 / 9 words per thread each) its global
// load is in flight across two steps of MMA; bf16 W (16 words a set) keeps one set (registers).
template <int BM, int MODE, int FMT, int PREC>
__global__ void __launch_bounds__(kThreads, 2) k_gemm_v2(const GemmArgs g) {
  constexpr int WM = BM / 2, MI = WM / 16;
  constexpr bool kSplit = PREC == kPrecSplit;
  constexpr int kWSets = FMT == kBF16 ? 1 : 2;
  extern __shared__ uint4 smem_u4[];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem_u4);  // [2][BM][kSK]
  uint16_t* Bs = As + 2 * BM * kSK;                     // [2][kBN][kSK]
  uint16_t* Al = Bs + 2 * kBN * kSK;                    // kPrecSplit: [2][BM][kSK] low parts
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wm = warp >> 2, wn = warp & 3;

  int64_t e;
  int r0, r1;
  if (!block_rows(g, BM, e, r0, r1)) return;
  const int KT = g.W0.cols / kBK;

  BTile<FMT, PREC> wt[kWSets];
#pragma unroll
  for (int i = 0; i < kWSets; ++i) bind_w_row<MODE>(wt[i], g, e);

  float acc[MI][4][4];
  zero_acc(acc);

  // prologue: A(0) in flight, B(0) in shared memory, W(1 .. kWSets) in registers
  load_a_tile<BM, kSplit>(g, As, Al, r0, r1, 0);
  wt[0].load(0);
  wt[0].store(Bs);
#pragma unroll
  for (int t = 1; t <= kWSets; ++t)
    if (t < KT) wt[t % kWSets].load(t * kBK);

  auto step = [&](auto parity, int kt) {
    constexpr int P = decltype(parity)::value, Q = P ^ 1;
    constexpr int S = (P + 1) % kWSets;  // the register set of W(kt+1)
    cp_wait<0>();
    __syncthreads();
    const bool more = kt + 1 < KT;
    if (more) load_a_tile<BM, kSplit>(g, As + Q * BM * kSK, Al + Q * BM * kSK, r0, r1, (kt + 1) * kBK);
    warp_mma_ktile<MI, PREC>(acc, As + (P * BM + wm * WM) * kSK, Al + (P * BM + wm * WM) * kSK,
                             Bs + (P * kBN + wn * 32) * kSK, lane);
    if (more) {
      wt[S].store(Bs + Q * kBN * kSK);
      if (kt + 1 + kWSets < KT) wt[S].load((kt + 1 + kWSets) * kBK);
    }
  };
  for (int kt = 0; kt < KT; kt += 2) {
    step(std::integral_constant<int, 0>(), kt);
    if (kt + 1 < KT) step(std::integral_constant<int, 1>(), kt + 1);
  }
  store_tile<BM, MODE, PREC>(g, acc, r0, r1, wm, wn, lane);
}

// ---- simple reference path: one thread per output column, f32 dequantisation ----
__device__ float wval(const DMat& m, const uint8_t* w, const uint32_t* sb, int64_t row, int k) {
  return dmat_at(m, w, sb, row, k);
}

// A[r][k] as float in any precision (r: the A row, after the gather)
__device__ __forceinline__ float aval(const GemmArgs& g, int64_t r, int k) {
  const int64_t i = r * g.lda + k;
  if (g.prec == kPrecBF16) return bf2f(g.A[i]);
  float v = h2f_bits(g.A[i]);
  if (g.prec == kPrecSplit) v += h2f_bits(g.A_lo[i]);
  return v * g.a_scale[r];
}

template <int MODE>
__global__ void __launch_bounds__(128) k_gemm_simple(const GemmArgs g) {
  int64_t e;
  int r0, r1;
  if (!block_rows(g, kGemmTileM, e, r0, r1)) return;
  const int c = col_tile(g) * 128 + threadIdx.x;
  if (c >= g.W0.rows) return;
  const int K = g.W0.cols;
  const uint8_t* w0 = g.W0.w + e * g.w_stride;
  const uint32_t* s0 = g.W0.sb ? g.W0.sb + e * g.sb_stride : nullptr;
  const uint8_t* w1 = MODE == kGemmSiluMul ? g.W1.w + e * g.w_stride : nullptr;
  const uint32_t* s1 = MODE == kGemmSiluMul && g.W1.sb ? g.W1.sb + e * g.sb_stride : nullptr;
  for (int r = r0; r < r1; ++r) {
    const int64_t ar = g.a_rows ? g.a_rows[r] : r;
    float s = 0.f, u = 0.f;
    for (int k = 0; k < K; ++k) {
      const float x = aval(g, ar, k);
      s = fmaf(x, wval(g.W0, w0, s0, c, k), s);
      if constexpr (MODE == kGemmSiluMul) u = fmaf(x, wval(g.W1, w1, s1, c, k), u);
    }
    if constexpr (MODE == kGemmSiluMul) {
      if (g.Cb) g.Cb[int64_t(r) * g.ldc + c] = f2bf(silu_f(s) * u);
      else g.C[int64_t(r) * g.ldc + c] = silu_f(s) * u;
    }
    else if constexpr (MODE == kGemmAdd) g.C[int64_t(r) * g.ldc + c] += s;
    else g.C[int64_t(r) * g.ldc + c] = s;
  }
}

// Launches k_gemm_v2, setting its dynamic shared memory limit on first use.
template <int BM, int MODE, int FMT, int PREC>
void launch_tc(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  constexpr size_t smem = size_t(2) * (BM * (PREC == kPrecSplit ? 2 : 1) + kBN) * kSK * 2;
  void (*kern)(GemmArgs) = k_gemm_v2<BM, MODE, FMT, PREC>;
  static bool once = [kern] {
    LILY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    return true;
  }();
  (void)once;
  kern<<<grid, kThreads, smem, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

template <int BM, int MODE, int PREC>
void run_fmt(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  switch (g.W0.fmt) {
    case kQ4: launch_tc<BM, MODE, kQ4, PREC>(g, grid, s); break;
    case kQ4Z: launch_tc<BM, MODE, kQ4Z, PREC>(g, grid, s); break;
    case kQ4H: launch_tc<BM, MODE, kQ4H, PREC>(g, grid, s); break;
    case kQ8: launch_tc<BM, MODE, kQ8, PREC>(g, grid, s); break;
    case kQ8H: launch_tc<BM, MODE, kQ8H, PREC>(g, grid, s); break;
    case kF8: launch_tc<BM, MODE, kF8, PREC>(g, grid, s); break;
    case kI8: launch_tc<BM, MODE, kI8, PREC>(g, grid, s); break;
    case kQ6: launch_tc<BM, MODE, kQ6, PREC>(g, grid, s); break;
    case kBF16: launch_tc<BM, MODE, kBF16, PREC>(g, grid, s); break;
    default: throw Error("prefill_gemm: unknown weight format");
  }
}

template <int BM, int MODE>
void run_prec(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  if (g.prec == kPrecSplit) run_fmt<BM, MODE, kPrecSplit>(g, grid, s);
  else if (g.prec == kPrecFP16) run_fmt<BM, MODE, kPrecFP16>(g, grid, s);
  else run_fmt<BM, MODE, kPrecBF16>(g, grid, s);
}

template <int BM>
void run_mode(const GemmArgs& g, int mode, dim3 grid, cudaStream_t s) {
  if (mode == kGemmStore) run_prec<BM, kGemmStore>(g, grid, s);
  else if (mode == kGemmAdd) run_prec<BM, kGemmAdd>(g, grid, s);
  else run_prec<BM, kGemmSiluMul>(g, grid, s);
}

}  // namespace

const char* gemm_kernel_name(int kernel) {
  switch (kernel) {
    case kGemmKernelV2: return "v2";
    case kGemmKernelWG: return "wg";
    case kGemmKernelAuto: return "auto";
    default: return "?";
  }
}

int gemm_kernel_resolved(int kernel, int prec) {
  if (kernel == kGemmKernelAuto) kernel = prefill_gemm_wg_available() ? int(kGemmKernelWG) : int(kGemmKernelV2);
  if (kernel == kGemmKernelWG && !prefill_gemm_wg_available())
    throw Error("prefill_gemm: the wg kernel needs a Hopper GPU and a build with sm_90a");
  if (kernel != kGemmKernelV2 && kernel != kGemmKernelWG)
    throw Error("prefill_gemm: unknown GemmArgs::kernel " + std::to_string(kernel));
  return kernel;
}

void prefill_gemm(const GemmArgs& g, int mode, cudaStream_t s, bool simple) {
  const DMat& w = g.W0;
  const int K = w.cols;
  if (mode == kGemmSiluMul &&
      (g.W1.fmt != w.fmt || g.W1.rows != w.rows || g.W1.cols != K || g.W1.group != w.group || (!g.Cb && !g.C)))
    throw Error("prefill_gemm: gate and up must share shape and format");
  if (mode != kGemmSiluMul && !g.C) throw Error("prefill_gemm: no output");
  if (g.prec != kPrecBF16 && g.prec != kPrecFP16 && g.prec != kPrecSplit) throw Error("prefill_gemm: bad precision");
  if (g.prec != kPrecBF16 && !g.a_scale) throw Error("prefill_gemm: fp16 operands need row scales");
  if (g.prec == kPrecSplit && !g.A_lo) throw Error("prefill_gemm: split operands need the low parts");
  const bool grouped = g.tiles != nullptr;
  if (!grouped && g.M <= 0) return;
  const int ncols = mode == kGemmSiluMul ? 64 : kBN;
  const bool fast_ok = !simple && K % kBK == 0 && (!fmt_sb(w.fmt) || w.group % 32 == 0) && g.lda % 8 == 0 &&
                       (reinterpret_cast<uintptr_t>(g.A) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(g.A_lo) & 15) == 0;
  if (!fast_ok) {
    const int row_tiles = grouped ? g.max_tiles : (g.M + kGemmTileM - 1) / kGemmTileM;
    const dim3 grid = gemm_grid(g, row_tiles, (w.rows + 127) / 128);
    if (mode == kGemmStore) k_gemm_simple<kGemmStore><<<grid, 128, 0, s>>>(g);
    else if (mode == kGemmAdd) k_gemm_simple<kGemmAdd><<<grid, 128, 0, s>>>(g);
    else k_gemm_simple<kGemmSiluMul><<<grid, 128, 0, s>>>(g);
    LILY_CUDA_CHECK_LAUNCH();
    return;
  }
  const int kernel = gemm_kernel_resolved(g.kernel, g.prec);
  const int ny = (w.rows + ncols - 1) / ncols;
  if (kernel == kGemmKernelWG) {
    if (grouped && g.tile_m != kGemmTileMBig && g.tile_m != kGemmTileM)
      throw Error("prefill_gemm: grouped tile rows must be 64 or 128");
    const int bm = grouped ? g.tile_m : g.M > 64 ? 128 : 64;
    prefill_gemm_wg(g, mode, bm, gemm_grid(g, grouped ? g.max_tiles : (g.M + bm - 1) / bm, ny), s);
  } else if (grouped) {
    if (g.tile_m == kGemmTileMBig) run_mode<kGemmTileMBig>(g, mode, gemm_grid(g, g.max_tiles, ny), s);
    else if (g.tile_m == kGemmTileM) run_mode<kGemmTileM>(g, mode, gemm_grid(g, g.max_tiles, ny), s);
    else throw Error("prefill_gemm: grouped tile rows must be 64 or 128");
  } else if (g.M > 64) {
    run_mode<128>(g, mode, gemm_grid(g, (g.M + 127) / 128, ny), s);
  } else {
    run_mode<64>(g, mode, gemm_grid(g, (g.M + 63) / 64, ny), s);
  }
}

}  // namespace lily::cuda
