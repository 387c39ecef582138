// Prefill GEMM: C[r][c] = sum_k A[r][k] W[c][k] with A 16-bit operand rows and W in the checkpoint's format (MLX
// affine 4/8-bit or bf16). Block tile BM x 128 x 64 (k), 8 warps (2 x 4), mma.sync m16n8k16 with f32
// accumulation; PREC (prefill.h PrefillPrec) picks bf16 or fp16 operands, kPrecSplit adds the fp16 low part of A
// (second A tile, second mma with the same W fragment). A tiles come in by cp.async (optionally gathered through
// a_rows), W tiles are read as packed words into registers one k-tile ahead, dequantised (s*q + b in f32, rounded
// to bf16 or saturating fp16) and stored to shared memory: weights are never expanded in global memory.
// Double-buffered shared memory, one sync pair per k-tile. fp16 A rows carry a power-of-two scale, applied to the
// f32 accumulator in the epilogue. Dense mode tiles rows [0, M); grouped mode reads a device tile map
// {expert, r0, r1} (the MoE expert groups). kGemmSiluMul computes gate and up of the same 64 output columns in one
// tile (each warp: 16 gate + 16 up columns) and writes silu(gate) * up (bf16 to Cb, or f32 to C).
#include "cuda/prefill.h"
#include "cuda/prefill_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kBN = 128, kBK = 64, kSK = kBK + 8;  // smem row stride in bf16 (144 bytes: ldmatrix conflict-free)
constexpr int kThreads = 256;

// The rows this block multiplies: grouped mode reads (expert, first row, end row) from the device tile map
// (false: past the tiles the routing produced), dense mode takes rows [blockIdx.x * tile_m, +tile_m) of [0, M).
__device__ __forceinline__ bool block_rows(const GemmArgs& g, int tile_m, int64_t& e, int& r0, int& r1) {
  e = 0;
  if (g.tiles) {
    if (int(blockIdx.x) >= *g.n_tiles) return false;
    const int* t = g.tiles + 3 * blockIdx.x;
    e = t[0];
    r0 = t[1];
    r1 = t[2];
  } else {
    r0 = blockIdx.x * tile_m;
    r1 = min(g.M, r0 + tile_m);
  }
  return true;
}

__device__ __forceinline__ const uint8_t* mat_w(const DMat& m, int64_t e, int64_t ws) { return m.w + e * ws; }

// Per-thread share of a W tile: 32 consecutive k of one tile row (thread t: row t/2, half t%2).
template <int PREC>
__device__ __forceinline__ uint32_t pack_w(float lo, float hi) {
  if constexpr (PREC == kPrecBF16) return pack_bf2(lo, hi);
  else return pack_h2(lo, hi);
}

template <int FMT, int PREC>
struct BTile {
  static constexpr int kU4 = FMT == kQ4 ? 1 : FMT == kQ8 ? 2 : 4;  // 16-byte words per 32 elements
  uint4 raw[kU4];
  uint32_t sb = 0;
  const uint8_t* w = nullptr;      // row start (null: row out of range)
  const uint32_t* sbr = nullptr;   // row's (scale, bias) words
  int group = 64;

  __device__ __forceinline__ void load(int k0) {
    if (!w) return;
    const int k = k0 + (threadIdx.x & 1) * 32;
#pragma unroll
    for (int u = 0; u < kU4; ++u) raw[u] = ldg_stream(w + (int64_t(k) * (FMT == kQ4 ? 4 : FMT == kQ8 ? 8 : 16)) / 8 + u * 16);
    if constexpr (FMT != kBF16) sb = __ldg(sbr + k / group);
  }
  __device__ __forceinline__ void store(uint16_t* Bs) const {
    uint4* dst = reinterpret_cast<uint4*>(Bs + (threadIdx.x >> 1) * kSK + (threadIdx.x & 1) * 32);
    if (!w) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = make_uint4(0, 0, 0, 0);
      return;
    }
    if constexpr (FMT == kBF16 && PREC == kPrecBF16) {
#pragma unroll
      for (int i = 0; i < 4; ++i) dst[i] = raw[i];
    } else if constexpr (FMT == kBF16) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dst[i] = make_uint4(bf2_to_h2(raw[i].x), bf2_to_h2(raw[i].y), bf2_to_h2(raw[i].z), bf2_to_h2(raw[i].w));
    } else if constexpr (FMT == kQ4) {
      const float s16 = 16.f * bf_lo(sb), b = bf_hi(sb) - s16;
      const uint32_t wv[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const uint32_t x = wv[i];
        dst[i] = make_uint4(pack_w<PREC>(fmaf(s16, q4f<0>(x), b), fmaf(s16, q4f<1>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<2>(x), b), fmaf(s16, q4f<3>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<4>(x), b), fmaf(s16, q4f<5>(x), b)),
                            pack_w<PREC>(fmaf(s16, q4f<6>(x), b), fmaf(s16, q4f<7>(x), b)));
      }
    } else {
      const float s256 = 256.f * bf_lo(sb), b = bf_hi(sb) - s256;
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const uint32_t wv[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
#pragma unroll
        for (int i = 0; i < 2; ++i) {
          dst[u * 2 + i] = make_uint4(pack_w<PREC>(fmaf(s256, q8f<0>(wv[2 * i]), b), fmaf(s256, q8f<1>(wv[2 * i]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<2>(wv[2 * i]), b), fmaf(s256, q8f<3>(wv[2 * i]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<0>(wv[2 * i + 1]), b),
                                               fmaf(s256, q8f<1>(wv[2 * i + 1]), b)),
                                      pack_w<PREC>(fmaf(s256, q8f<2>(wv[2 * i + 1]), b),
                                               fmaf(s256, q8f<3>(wv[2 * i + 1]), b)));
        }
      }
    }
  }
};

template <int BM, int MODE, int FMT, int PREC>
__global__ void __launch_bounds__(kThreads) k_gemm(const GemmArgs g) {
  constexpr int WM = BM / 2, MI = WM / 16;
  constexpr bool kSplit = PREC == kPrecSplit;
  extern __shared__ uint4 smem_u4[];
  uint16_t* As = reinterpret_cast<uint16_t*>(smem_u4);  // [2][BM][kSK]
  uint16_t* Bs = As + 2 * BM * kSK;                     // [2][kBN][kSK]
  uint16_t* Al = Bs + 2 * kBN * kSK;                    // kPrecSplit: [2][BM][kSK] low parts
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp >> 2, wn = warp & 3;

  int64_t e;
  int r0, r1;
  if (!block_rows(g, BM, e, r0, r1)) return;
  const int K = g.W0.cols;

  // this thread's W row
  BTile<FMT, PREC> bt;
  {
    const int r = tid >> 1;
    const DMat* m = &g.W0;
    int row;
    if constexpr (MODE == kGemmSiluMul) {
      if (r & 16) m = &g.W1;
      row = blockIdx.y * 64 + (r >> 5) * 16 + (r & 15);
    } else {
      row = blockIdx.y * kBN + r;
    }
    if (row < m->rows) {
      bt.w = mat_w(*m, e, g.w_stride) + int64_t(row) * m->row_bytes;
      if constexpr (FMT != kBF16) bt.sbr = m->sb + e * g.sb_stride + int64_t(row) * m->sb_row;
      bt.group = m->group;
    }
  }
  // A rows: BM rows x 64 bf16 = BM * 8 16-byte pieces
  auto load_a = [&](int buf, int k0) {
    uint16_t* dst = As + buf * BM * kSK;
#pragma unroll
    for (int i = tid; i < BM * 8; i += kThreads) {
      const int r = i >> 3, c = (i & 7) * 8;
      int gr = min(r0 + r, r1 - 1);
      if (g.a_rows) gr = g.a_rows[gr];
      cp_async16(dst + r * kSK + c, g.A + int64_t(gr) * g.lda + k0 + c);
      if constexpr (kSplit) cp_async16(Al + buf * BM * kSK + r * kSK + c, g.A_lo + int64_t(gr) * g.lda + k0 + c);
    }
    cp_commit();
  };

  float acc[MI][4][4];
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[i][j][q] = 0.f;

  const int KT = K / kBK;
  load_a(0, 0);
  bt.load(0);
  bt.store(Bs);
  for (int kt = 0; kt < KT; ++kt) {
    const int cur = kt & 1;
    const bool more = kt + 1 < KT;
    if (more) {
      load_a(cur ^ 1, (kt + 1) * kBK);
      bt.load((kt + 1) * kBK);
      cp_wait<1>();
    } else {
      cp_wait<0>();
    }
    __syncthreads();
    const uint16_t* as = As + cur * BM * kSK;
    const uint16_t* bs = Bs + cur * kBN * kSK;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t a[MI][4];
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        ldsm_x4(a[mi], as + (wm * WM + mi * 16 + (lane & 15)) * kSK + kk * 16 + (lane >> 4) * 8);
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t b[4];
        ldsm_x4(b, bs + (wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8) * kSK + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          mma_op<PREC>(acc[mi][2 * nj], a[mi], b[0], b[1]);
          mma_op<PREC>(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
        }
      }
      if constexpr (kSplit) {  // low parts of A against the same W fragments (reloaded: keeps registers low)
        const uint16_t* al = Al + cur * BM * kSK;
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
          ldsm_x4(a[mi], al + (wm * WM + mi * 16 + (lane & 15)) * kSK + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int nj = 0; nj < 2; ++nj) {
          uint32_t b[4];
          ldsm_x4(b, bs + (wn * 32 + nj * 16 + (lane & 7) + (lane >> 4) * 8) * kSK + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mi = 0; mi < MI; ++mi) {
            mma_op<PREC>(acc[mi][2 * nj], a[mi], b[0], b[1]);
            mma_op<PREC>(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
          }
        }
      }
    }
    if (more) bt.store(Bs + (cur ^ 1) * kBN * kSK);
    __syncthreads();
  }

  // epilogue
  const int gq = lane >> 2, cq = lane & 3;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int r = r0 + wm * WM + mi * 16 + gq + 8 * hh;
      if (r >= r1) continue;
      float rs = 1.f;
      if constexpr (PREC != kPrecBF16) rs = g.a_scale[g.a_rows ? g.a_rows[r] : r];
      if constexpr (MODE == kGemmSiluMul) {
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int c = blockIdx.y * 64 + wn * 16 + ni * 8 + 2 * cq + q;
            if (c < g.W0.rows) {
              const float gv = acc[mi][ni][2 * hh + q] * rs, uv = acc[mi][ni + 2][2 * hh + q] * rs;
              if (g.Cb) g.Cb[int64_t(r) * g.ldc + c] = f2bf(silu_f(gv) * uv);
              else g.C[int64_t(r) * g.ldc + c] = silu_f(gv) * uv;
            }
          }
        }
      } else {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const int c = blockIdx.y * kBN + wn * 32 + ni * 8 + 2 * cq + q;
            if (c < g.W0.rows) {
              float* p = g.C + int64_t(r) * g.ldc + c;
              if constexpr (MODE == kGemmAdd) *p += acc[mi][ni][2 * hh + q] * rs;
              else *p = acc[mi][ni][2 * hh + q] * rs;
            }
          }
        }
      }
    }
  }
}

// ---- simple reference path: one thread per output column, f32 dequantisation ----
__device__ float wval(const DMat& m, const uint8_t* w, const uint32_t* sb, int64_t row, int k) {
  if (m.fmt == kBF16) return bf2f(reinterpret_cast<const uint16_t*>(w + row * m.row_bytes)[k]);
  const uint32_t s = sb[row * m.sb_row + k / m.group];
  uint32_t q;
  if (m.fmt == kQ4) q = (reinterpret_cast<const uint32_t*>(w + row * m.row_bytes)[k / 8] >> (4 * (k % 8))) & 15u;
  else q = (reinterpret_cast<const uint32_t*>(w + row * m.row_bytes)[k / 4] >> (8 * (k % 4))) & 255u;
  return bf_lo(s) * float(q) + bf_hi(s);
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
  const int c = blockIdx.y * 128 + threadIdx.x;
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

template <int BM, int MODE, int FMT, int PREC>
void run_fast(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  constexpr size_t smem = size_t(2) * (BM * (PREC == kPrecSplit ? 2 : 1) + kBN) * kSK * 2;
  static bool once = [] {
    LILY_CUDA_CHECK(cudaFuncSetAttribute(k_gemm<BM, MODE, FMT, PREC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(smem)));
    return true;
  }();
  (void)once;
  k_gemm<BM, MODE, FMT, PREC><<<grid, kThreads, smem, s>>>(g);
  LILY_CUDA_CHECK_LAUNCH();
}

template <int BM, int MODE, int PREC>
void run_fmt(const GemmArgs& g, dim3 grid, cudaStream_t s) {
  switch (g.W0.fmt) {
    case kQ4: run_fast<BM, MODE, kQ4, PREC>(g, grid, s); break;
    case kQ8: run_fast<BM, MODE, kQ8, PREC>(g, grid, s); break;
    default: run_fast<BM, MODE, kBF16, PREC>(g, grid, s); break;
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
  const bool fast_ok = !simple && K % kBK == 0 && (w.fmt == kBF16 || w.group % 32 == 0) && g.lda % 8 == 0 &&
                       (reinterpret_cast<uintptr_t>(g.A) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(g.A_lo) & 15) == 0;
  if (!fast_ok) {
    const dim3 grid(grouped ? g.max_tiles : (g.M + kGemmTileM - 1) / kGemmTileM, (w.rows + 127) / 128);
    if (mode == kGemmStore) k_gemm_simple<kGemmStore><<<grid, 128, 0, s>>>(g);
    else if (mode == kGemmAdd) k_gemm_simple<kGemmAdd><<<grid, 128, 0, s>>>(g);
    else k_gemm_simple<kGemmSiluMul><<<grid, 128, 0, s>>>(g);
    LILY_CUDA_CHECK_LAUNCH();
    return;
  }
  const int ny = (w.rows + ncols - 1) / ncols;
  if (grouped) {
    if (g.tile_m == kGemmTileMBig) run_mode<kGemmTileMBig>(g, mode, dim3(g.max_tiles, ny), s);
    else if (g.tile_m == kGemmTileM) run_mode<kGemmTileM>(g, mode, dim3(g.max_tiles, ny), s);
    else throw Error("prefill_gemm: grouped tile rows must be 64 or 128");
  } else if (g.M > 64) {
    run_mode<128>(g, mode, dim3((g.M + 127) / 128, ny), s);
  } else {
    run_mode<64>(g, mode, dim3((g.M + 63) / 64, ny), s);
  }
}

}  // namespace lily::cuda
