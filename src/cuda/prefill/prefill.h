// Batched prefill kernels (n tokens of one sequence at once) and their host launchers. Activations between
// kernels: the residual stream and projections in f32; the inputs of every matrix multiply are 16-bit operand
// rows (row-major, one row per token) in one of three precisions (PrefillPrec):
//   kPrecBF16:  A bf16, weights dequantised to bf16, bf16 mma (8-bit significand).
//   kPrecFP16:  A = scale[row] * hi with hi fp16 and scale a power of two chosen per row so that max|hi| lies in
//               [2^14, 2^15) (no overflow whatever the activation range); weights s*q+b in f32 rounded to fp16
//               (saturating); fp16 mma (11-bit significand), the row scale folded into the f32 result.
//   kPrecSplit: as kPrecFP16 plus a second fp16 part, A = scale * (hi + lo), two mma per k-step (A to ~22 bits).
//   kPrecMixed: a PrefillRunner mode, not a GEMM precision: operand rows as kPrecSplit, the GEMMs of some roles
//               (PrefillRunner::kMixedSplitRoles) split, the others fp16 on the high parts.
// All launchers are asynchronous on `s` and check the launch.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

enum PrefillPrec : int { kPrecBF16 = 0, kPrecFP16 = 1, kPrecSplit = 2, kPrecMixed = 3 };
// Parses LILY_CUDA_PREFILL_PRECISION values "bf16" | "fp16" | "split" | "mixed" (case-sensitive); throws on
// anything else.
int parse_prefill_prec(const char* s);
const char* prefill_prec_name(int prec);

// One GEMM operand: n rows of K elements (ld K) in precision prec. bf16: hi only; fp16: hi + scale;
// split: hi + lo + scale.
struct ActRows {
  uint16_t* hi = nullptr;
  uint16_t* lo = nullptr;
  float* scale = nullptr;
};

// ---- GEMM: C[r][c] (op)= sum_k A[r][k] * W[c][k], tensor-core MMA with the weights dequantised per tile ----
enum GemmMode : int {
  kGemmStore = 0,    // C f32 = acc
  kGemmAdd = 1,      // C f32 += acc (residual)
  kGemmSiluMul = 2,  // dual: W0 = gate, W1 = up (same shape); [r][j] = silu(gate.x) * (up.x), j < W0.rows, to
                     // Cb (bf16) when set, else to C (f32)
};

constexpr int kGemmTileM = 64;      // rows per tile of the grouped GEMM at most (small expert groups)
constexpr int kGemmTileMBig = 128;  // ... for large groups: each tile dequantises its expert's whole W once
struct GemmArgs {
  const uint16_t* A = nullptr;   // operand rows (bf16, or fp16 hi parts), lda elements apart
  const uint16_t* A_lo = nullptr;   // kPrecSplit: fp16 low parts, same layout
  const float* a_scale = nullptr;   // kPrecFP16 / kPrecSplit: per A row (indexed like A, i.e. after a_rows)
  int prec = kPrecBF16;
  int lda = 0;
  const int32_t* a_rows = nullptr;  // optional gather: output row r reads A row a_rows[r]
  int M = 0;                     // rows (dense mode)
  DMat W0, W1;                   // [N, K]; W1 only for kGemmSiluMul
  // grouped mode (MoE experts): tiles[i] = {expert, r0, r1} for i < *n_tiles; expert e's matrices are W0/W1 with
  // w += e * w_stride, sb += e * sb_stride. Null tiles = dense mode over rows [0, M).
  const int32_t* tiles = nullptr;
  const int32_t* n_tiles = nullptr;
  int max_tiles = 0;
  int tile_m = kGemmTileM;       // grouped mode: rows per tile at most (kGemmTileM or kGemmTileMBig)
  int64_t w_stride = 0, sb_stride = 0;
  float* C = nullptr;            // f32 out (kGemmStore, kGemmAdd)
  uint16_t* Cb = nullptr;        // bf16 out (kGemmSiluMul; null: f32 to C)
  int ldc = 0;
  int kernel = 0;                // tensor-core kernel, a GemmKernel (0: kGemmKernelAuto)
  bool rows_first = false;       // grid order: row tiles on blockIdx.x (else column tiles; prefill_gemm_tiles.cuh)
};
// The tensor-core GEMM kernels: kGemmKernelV2 = k_gemm_v2 (prefill_gemm.cu, mma.sync: one barrier per k-tile,
// quantised W two k-tiles ahead), kGemmKernelWG = k_gemm_wg (prefill_gemm_wg.cu, Hopper wgmma, sm_90a builds only;
// every precision), kGemmKernelAuto = wg where prefill_gemm_wg_available(), else v2.
enum GemmKernel : int { kGemmKernelAuto = 0, kGemmKernelV2 = 2, kGemmKernelWG = 3 };
const char* gemm_kernel_name(int kernel);
// The kernel a call with this GemmArgs::kernel and precision runs (resolves auto; never Auto).
// Throws when wg is asked for where it is not available.
int gemm_kernel_resolved(int kernel, int prec);
// Whether this build carries k_gemm_wg for the current device (an sm_90a image that runs; probed once).
bool prefill_gemm_wg_available();
// Launches k_gemm_wg (prefill_gemm calls it; preconditions as the fast path there), bm = 64 or 128 tile rows.
void prefill_gemm_wg(const GemmArgs& g, int mode, int bm, dim3 grid, cudaStream_t s);
// simple = true: one thread per output, f32 dequantisation (the slow reference / fallback path).
void prefill_gemm(const GemmArgs& g, int mode, cudaStream_t s, bool simple = false);

// ---- small row kernels ----
// x[t][:] = dequant(E row ids[t]) for t < n
void prefill_embed(const DMat& E, const int32_t* ids, int n, float* x, cudaStream_t s);
// out[t] = bf16(rmsnorm(x[t]) * w), x rows of H floats (ldx apart)
void prefill_rmsnorm_bf16(const float* x, int ldx, const float* w, int n, int H, float eps, uint16_t* out,
                          cudaStream_t s);
// the same into operand rows of precision prec (bf16: out.hi only)
void prefill_rmsnorm_act(const float* x, int ldx, const float* w, int n, int H, float eps, int prec,
                         const ActRows& out, cudaStream_t s);
// out[t][0..H) (ldo apart) = rmsnorm(x[t]) * w in f32 (prefill_norm_f32.cu)
void prefill_rmsnorm_f32(const float* x, int ldx, const float* w, int n, int H, float eps, float* out, int ldo,
                         cudaStream_t s);
// f32 rows x[t][0..K) (ldx apart) -> operand rows of precision prec (row scale: see PrefillPrec)
void prefill_quant_rows(const float* x, int ldx, int n, int K, int prec, const ActRows& out, cudaStream_t s);

// ---- MoE routing, all on the device ----
struct RouteArgs {
  const float* logits = nullptr; // [n][E]
  int n = 0, E = 0, k = 0;
  int32_t* idx = nullptr;        // [n*k] selected experts
  float* w = nullptr;            // [n*k] routing weights
  int32_t* counts = nullptr;     // [E] rows per expert (zeroed by prefill_route)
  int32_t* fill = nullptr;       // [E] scatter cursors
  int32_t* tiles = nullptr;      // [max_tiles][3] {expert, r0, r1} (r1 - r0 <= tile_m)
  int32_t* n_tiles = nullptr;    // [1]
  int max_tiles = 0;             // >= ceil(n*k / kGemmTileM) + E
  int tile_m = kGemmTileM;       // kGemmTileM or kGemmTileMBig: an expert's rows split into ceil(rows / tile_m)
                                 // tiles of balanced size
  int32_t* row_token = nullptr;  // [n*k] token of each expert-sorted row
  int32_t* slot_row = nullptr;   // [n*k] expert-sorted row of (token t, choice j) at t*k + j
};
// top-k softmax routing per token, histogram, prefix scan, tile map, scatter (4 launches).
void prefill_route(const RouteArgs& r, cudaStream_t s);
// x[t] += sigmoid(sg[t]) * sh[t] + sum_j w[t*k+j] * y[slot_row[t*k+j]]   (rows of H floats)
void prefill_moe_combine(float* x, const float* sh, const float* sg, int ld_sg, const float* y, const float* w,
                         const int32_t* slot_row, int n, int k, int H, cudaStream_t s);

// ---- Gated DeltaNet over a chunk ----
struct GdnChunkArgs {
  const float* proj = nullptr;   // [n][ldp]: qkv (conv_dim) | z (Hv*Dv) | b (Hv) | a (Hv)
  int ldp = 0;
  int n = 0, pos0 = 0;
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
  const float* conv_w = nullptr; // [conv_dim][K]
  const float* dt_bias = nullptr, *a_neg = nullptr, *norm_w = nullptr;
  float eps = 1e-6f;
  float* ring = nullptr;         // this layer's conv ring [conv_dim][K] (slot p % K = raw input of position p)
  float* S = nullptr;            // this layer's state [Hv][Dv][Dk]
  float* cbuf = nullptr;         // scratch [n][conv_dim]: conv + SiLU, q/k l2-normalised (q * 1/sqrt(Dk))
  float* obuf = nullptr;         // scratch [n][Hv*Dv]: delta-rule outputs
  uint16_t* y = nullptr;         // [n][Hv*Dv] bf16 gated-RMSNorm output
  float* y_f = nullptr;          // when set: f32 output there instead of y
  // chunked = true and ws set: the delta rule in chunks of kGdnChunk tokens (WY / UT-transform form on tensor
  // cores: k_prep_tc + k_cscan_tc, prefill_gdn_chunked_tc.cu) instead of the sequential scan; ws = scratch of
  // prefill_gdn_ws_floats(n, Hv, Dk, Dv) floats.
  bool chunked = false;
  float* ws = nullptr;
  int chunked_min_n = 32;  // shorter chunks take the sequential scan
  int scan = -1;  // sequential scan kernel, a GdnScan; -1: kGdnScanWide
};
inline constexpr int kGdnChunk = 64;
// The sequential delta-rule scan kernels (prefill_gdn.cu): kGdnScanPlain = k_scan (staged with plain loads; the
// reference), kGdnScanWide = k_scan_wide (cp.async double buffer, 8 lanes per row of S: one 3-level butterfly
// reduces 4 rows).
enum GdnScan : int { kGdnScanPlain = 0, kGdnScanWide = 2 };
const char* gdn_scan_name(int scan);
// The scan kernel prefill_gdn runs for g when it takes the sequential path: g.scan (wide when g.scan < 0), or plain
// where the cp.async kernels cannot stage the inputs (q/k rows not 16-byte aligned).
int prefill_gdn_scan_kernel(const GdnChunkArgs& g);
// The delta-rule form prefill runs (PrefillRunner): the tensor-core chunked form for chunks of >= kGdnTcMinN tokens
// where prefill_gdn_tc_device_ok and the prefill precision is fp16 or bf16 (the tc form is 1.02x the wide scan at
// 128 tokens, 0.76x at 64, 1.77x at 4096: docs/cuda-prefill.md), else the sequential scan (split and mixed
// precision keep the f32 scan: the tc form's single-tf32 output products measured as a fidelity loss there).
constexpr int kGdnTcMinN = 128;
// Whether the tc form supports these head sizes on the current device (shared memory); pointer alignment is
// checked per call by prefill_gdn_tc_supported.
bool prefill_gdn_tc_device_ok(int Dk, int Dv);
// The current device's opt-in shared memory per block in bytes (0 when it cannot be read); read once.
int gdn_smem_optin();
// scratch floats of the chunked form
size_t prefill_gdn_ws_floats(int n, int Hv, int Dk, int Dv);
// The tensor-core form's parts (prefill_gdn_chunked_tc.cu; prefill_gdn_uses_chunked / prefill_gdn_chunked_scan
// dispatch to them): its scratch floats, whether it supports g (Dk in 32..128 step 32,
// Dv % 8 == 0 and Dv <= 128, 16-byte aligned cbuf / ws, shared memory), and the two launches.
size_t prefill_gdn_tc_ws_floats(int n, int Hv, int Dk, int Dv);
bool prefill_gdn_tc_supported(const GdnChunkArgs& g);
void prefill_gdn_chunked_scan_tc(const GdnChunkArgs& g, cudaStream_t s);
// whether prefill_gdn takes the chunked path for these args (chunked and ws set, n >= chunked_min_n, head
// sizes and shared memory supported)
bool prefill_gdn_uses_chunked(const GdnChunkArgs& g);
// The chunked delta rule alone (k_prep_tc + k_cscan_tc over g's chunk; prefill_gdn calls it where
// prefill_gdn_uses_chunked(g), after the conv).
void prefill_gdn_chunked_scan(const GdnChunkArgs& g, cudaStream_t s);
void prefill_gdn(const GdnChunkArgs& g, cudaStream_t s);

// ---- gated attention over a chunk ----
struct AttnChunkArgs {
  const float* proj = nullptr;   // [n][ldp]: q|gate per head (nq*2*hd) | k (nkv*hd) | v (nkv*hd)
  int ldp = 0;
  int n = 0, pos0 = 0, max_ctx = 0;
  int nq = 0, nkv = 0, hd = 0, rope_dim = 0;
  double theta = 1e7;
  float eps = 1e-6f;
  const float* q_norm = nullptr, *k_norm = nullptr;
  uint16_t* kc = nullptr;        // this layer's K cache [nkv][max_ctx][hd] fp16 (f2kv)
  uint16_t* vc = nullptr;        // V cache, same layout
  uint16_t* qb = nullptr;        // scratch [n][nq][hd] normed + roped queries (fp16, f2kv)
  uint16_t* out = nullptr;       // [n][nq*hd] bf16 gated attention output
  float* out_f = nullptr;        // when set: f32 output there instead of out
  // Q K^T and P V as fp16 mma (Q, K and V saturate at +-65504: RMSNorm bounds |q|, |k| by sqrt(hd) * max|norm
  // weight|). precise = true: P V with P split into two fp16 parts (P = P_hi + P_lo, two mma).
  bool precise = false;
};
// simple = true: one warp per (token, head), scalar online softmax (reference / fallback).
void prefill_attn(const AttnChunkArgs& a, cudaStream_t s, bool simple = false);

}  // namespace lily::cuda
