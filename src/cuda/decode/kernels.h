// Host-callable launchers of the CUDA decode kernels and the plain structs they take (no CUDA headers needed
// beyond the runtime API, so cuda_backend.cpp and the tests include this). All activations are f32.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace lily::samp {
struct StepParams;  // engine/sample_math.h
}

namespace lily::cuda {

// kQ4: 4-bit codes, sb word = bf16 scale | bf16 bias << 16. kQ4H: the same with an fp16 pair (scales and biases
// wider than bf16 whose values are fp16 normals: GGUF Q4_K / Q4_1, 8x finer than bf16). kQ4Z: the same codes, sb
// word = the f32 scale with its 4 lowest mantissa bits replaced by an integer zero z in 0..15 (w = scale * (q - z);
// the GPTQ / AWQ / compressed-tensors repacks, exact to 2^-20 of the scale). kQ8: 8-bit codes, bf16 pair; kQ8H:
// the same with an fp16 pair (GGUF Q5_K / Q5_1). kF8 / kI8: 8-bit codes, f32
// scale. kQ6: 6-bit codes with their f32 scale inside each 16-byte chunk (GGUF Q6_K). kBF16: plain bf16.
enum Fmt : int { kQ4 = 4, kQ4Z = 5, kQ4H = 6, kQ8 = 8, kQ8H = 7, kF8 = 9, kI8 = 10, kQ6 = 11, kBF16 = 16 };

// A weight matrix on the device, W [rows, cols], y = W x.
//  kQ4/kQ8: w = rows x row_bytes of packed little-endian u32 (element k of a word in bits [k*bits, (k+1)*bits)),
//           sb = [rows][cols/group] u32, each (lo 16 bits = bf16 scale, hi 16 bits = bf16 bias); w = s*q + b.
//  kQ4H / kQ8H: kQ4 / kQ8 with fp16 scale and bias. kQ4Z: kQ4 with the word above.
//  kF8:     8-bit codes with an f32 scale per group and no bias: w = rows x cols e4m3 bytes (element k at byte k),
//           sb = [rows][ceil(cols/group)] u32, the f32 bits of s; w = s * e4m3(q). The FP8 checkpoints' 128x128
//           block scale repeated for each of the block's rows (group 128).
//  kI8:     the same with signed int8 codes: w = s * q (GGUF Q8_0 / Q5_0 after their affine repack: q = code - z).
//  kQ6:     GGUF Q6_K, 8 bits per weight: w = rows x row_bytes (= cols) of 16-byte chunks, chunk j holding columns
//           [16j, 16j + 16) (one Q6_K sub-block): words 0 and 1 the low nibbles packed as kQ4's (column i at bits
//           4 (i % 8) of word i / 8), word 2 the high two bits (byte b, bits 2G..2G+1: column 2b + G for G 0, 1 and
//           8 + 2b + G - 2 for G 2, 3, the order of XQ's int8 x), word 3 the f32 scale s = d * sc;
//           w = s * (q - 32), exact. sb unused.
//  kBF16:   w = rows x cols bf16, sb unused.
// cols % 32 == 0; row_bytes % 16 == 0; rows start 16-byte aligned.
struct DMat {
  const uint8_t* w = nullptr;
  const uint32_t* sb = nullptr;
  int fmt = kBF16;
  int rows = 0, cols = 0, group = 0;
  int64_t row_bytes = 0;
  int sb_row = 0;   // u32 words of sb per row (cols/group; 0 for kBF16)
  int gshift = -1;  // chunk c's sb word is c >> gshift where group / (the format's chunk elements) is a power of two
                    // (dmat_set_group); -1: (c * chunk elements) / group
};

// The 4-bit formats (one nibble per weight, same packing; they differ in the sb word only).
constexpr bool fmt_q4(int fmt) { return fmt == kQ4 || fmt == kQ4Z || fmt == kQ4H; }
// Elements per 16-byte chunk of a row (the unit the decode kernels load).
constexpr int fmt_chunk_elems(int fmt) { return fmt_q4(fmt) ? 32 : fmt == kBF16 ? 8 : 16; }
// Sets m.group and m.gshift (m.fmt set): a shift in place of the integer division the kernels' sb index would
// otherwise pay per chunk.
inline void dmat_set_group(DMat& m, int group) {
  const int e = fmt_chunk_elems(m.fmt), per = group > 0 && group % e == 0 ? group / e : 0;
  m.group = group;
  m.gshift = -1;
  if (per > 0 && (per & (per - 1)) == 0)
    for (m.gshift = 0; (1 << m.gshift) < per;) ++m.gshift;
}
// The 8-bit affine formats (bf16 or fp16 pairs).
constexpr bool fmt_q8(int fmt) { return fmt == kQ8 || fmt == kQ8H; }
// Whether the format has sb words (kBF16 has no scales; kQ6 keeps its scale inside the chunk).
constexpr bool fmt_sb(int fmt) { return fmt != kBF16 && fmt != kQ6; }
// The formats whose sb words are f32 scales (kF8, kI8: 8-bit codes, no bias).
constexpr bool fmt_code8(int fmt) { return fmt == kF8 || fmt == kI8; }

// E matrices of one shape stored back to back: expert e is m with w += e*w_stride, sb += e*sb_stride (elements).
struct DStack {
  DMat m;
  int64_t w_stride = 0, sb_stride = 0;
};

// One output segment of a fused GEMV: y[r] (+)= (W x)[r] for r < m.rows.
struct GemvSeg {
  DMat m;
  float* y = nullptr;
  int accumulate = 0;  // 1: y += W x (residual add)
};

constexpr int kMaxSegs = 4;

// Decode attention: at most kAttnSplits blocks per kv head (split-KV), merged in groups of kAttnGroup first; the
// partials buffer holds the splits, then the groups.
constexpr int kAttnSplits = 64;
constexpr int kAttnGroup = 8;  // splits per group of the two-level merge
constexpr int kAttnPartSlots = kAttnSplits + kAttnSplits / kAttnGroup;
constexpr int kAttnMaxKv = 8;  // kv heads the step counters hold

// Index of channel ch's slot for position p in a layer's conv ring ([conv_dim][K], slot p % K holds position p).
constexpr int64_t conv_ring_at(int ch, int K, int p) { return int64_t(ch) * K + p % K; }

// Per-sequence state pointers + step control, read by the kernels through one fixed device address so that a
// captured graph serves every sequence (the host rewrites it when switching sequences).
struct StepCtl {
  uint16_t* kv = nullptr;     // [n_full][2 (K,V)][nkv][max_ctx][hd] fp16 (f2kv)
  float* S = nullptr;         // [n_lin][Hv][Dv][Dk] f32 recurrent state
  float* conv = nullptr;      // [n_lin][conv_dim][K] f32 ring of raw conv inputs (slot p % K holds position p):
                              // a channel's K slots are contiguous (one 16-byte load at K = 4), see conv_ring_at
  int pos = 0;                // position of the token being consumed
  int max_ctx = 0;
  int cursor = 0;             // index into in_ids / out_ids of this step
  int n_given = 0;            // in_ids[0..n_given) are given; later inputs are the previous argmax
  unsigned long long best = 0;   // packed (ordered logit, ~id) argmax accumulator
  unsigned int lm_done = 0;      // blocks of the lm_head kernel finished this step
  unsigned int attn_done[kAttnMaxKv] = {};  // attention blocks (or groups) finished, per kv head
  unsigned int attn_gdone[kAttnMaxKv * (kAttnSplits / kAttnGroup)] = {};  // splits finished per (kv head, group)
};

// ---- the rows of a speculative verify in one launch ----
// A launcher given Rows{n, stride} runs n rows at once: row r reads and writes its activations, scratch and step
// control at byte offset r * stride from the pointers it is given (row 0's: CudaBackend lays the rows' scratch out at
// one stride, RowScratch), while the weights are shared (read once for all rows by the GEMVs and the lm_head). Each
// row's results equal, bit for bit, those of a launch for that row alone (the same sums in the same order).
constexpr int kMaxRows = 8;
struct Rows {
  int n = 1;
  int64_t stride = 0;  // bytes from one row's scratch to the next's
};
template <class T>
__host__ __device__ inline T* row_at(T* p, int r, int64_t stride) {  // row r's copy of a row-0 pointer (null stays null)
  return p ? reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + uintptr_t(int64_t(r) * stride)) : p;
}

// ---- activation precision of the 4-bit decode GEMVs (gemv, MoE gate_up/down) ----
// On (default; LILY_CUDA_INT8_X=0 turns it off): x is quantised per 32-element chunk to two int8 parts (hi + lo,
// ~16 bits, error <= max|x|/64516 per element) and the 4-bit codes are dotted with dp4a; off: f32 x, exact.
void set_decode_int8_x(bool on);
bool decode_int8_x();
bool use_int8_x(int fmt, int cols);  // the int8 path serves this matrix shape (4-bit or kQ6, cols <= 8192)

// ---- grid share: the row-parallel kernels (GEMVs, MoE, lm_head) take 1/share of the resident grid (1: all; a
// verify of n rows launches its MoE kernels with n, so that the rows' blocks run side by side, Rows) ----
void set_decode_grid_share(int share);
int decode_grid(int resident);  // max(1, resident / share)

// ---- launchers (all asynchronous on `s`; they check the launch) ----
// Row-parallel fused GEMV over up to kMaxSegs matrices sharing x (cols): optional RMSNorm prologue
// (xn = x / rms(x) * norm_w when norm_w != null). All segments must have the same fmt and cols.
// trace (LILY_PROFILE=trace): [3] globaltimer stamps (block 0 entry, block 0 x loaded, last block done) or null.
// hn (optional): x is read as consecutive heads of hn->dim elements, head h scaled by
// rsqrt(sum_p hn->ss[h * hn->parts + p] / dim + eps) (the DeltaNet gated norm finished by its out_proj).
constexpr int kHeadNormMaxParts = 8;
struct HeadNorm {
  const float* ss = nullptr;  // [n / dim][parts] partial sums of squares
  int dim = 0, parts = 0;     // dim % 16 == 0, 1 <= parts <= kHeadNormMaxParts
  float eps = 1e-6f;
  const void* xq = nullptr;   // x given instead as an XQ image (xq_image_bytes(cols); 4-bit int8-x path only,
                              // dim % 32 == 0) quantised by its producer without the heads' factors
};
// Bytes of an XQ image of n elements (n % 32 == 0): x in the int8 hi + lo form of the decode GEMVs, as a producer
// writes it for its consumer (gdn_decode's yq; HeadNorm::xq).
size_t xq_image_bytes(int n);
// Side rows of a GEMV (the router-from-y form: M = W_router diag(post_norm) O against out_proj's x, and A's rows,
// W_router diag(post_norm), against q/k/v's raw x (m_raw)): int16 rows with a per-row scale, each split into
// `pieces` column pieces of kGemvSidePiece columns whose dots land in separate partial vectors:
// part(q, j) = rscale[j] * (M[j, piece q] . x[piece q]). Computed by the warps of the launch next to their own rows,
// piece w by warp w (its loads issued before the PDL wait). cols == pieces * kGemvSidePiece. Partial (q, j) lands at
// part[q * part_q + j * part_j].
constexpr int kGemvSidePiece = 512;
struct GemvSide {
  const uint16_t* m = nullptr;   // [rows][cols] int16 bits (dotted with the GEMV's x, or the raw x: m_raw)
  const float* rscale = nullptr; // [rows]
  float* part = nullptr;
  int rows = 0, pieces = 0, part_q = 0, part_j = 0;
  bool m_raw = false;            // m's rows dotted with x as loaded (no norm, no head norm) instead of the GEMV's x
};
// rows (n > 1): x, the segments' y, hn's ss and xq and the side's part per row at the stride; each weight row is read
// once and dotted with every row's x; no trace.
void gemv(const GemvSeg* segs, int nseg, const float* x, const float* norm_w, float eps, cudaStream_t s,
          bool pdl, unsigned long long* trace = nullptr, const HeadNorm* hn = nullptr,
          const GemvSide* side = nullptr, const Rows& rows = {});

// Embedding: x[H] = dequant(embed row in_ids[ctl->cursor]).
void embed(const DMat& E, const int32_t* in_ids, const StepCtl* ctl, float* x, cudaStream_t s, bool pdl);

// lm_head with final RMSNorm, logits out [V], argmax; the last block writes out_ids[cursor] = argmax, feeds it to
// in_ids[cursor+1] when cursor+1 >= n_given, and advances cursor and pos.
// out_ids == null: logits only (the last block just resets the accumulators; sample_step then picks the id).
// trace (LILY_PROFILE=trace): [6] globaltimer stamps: block 0 entry, block 0 after pdl_wait, last block's rows done,
// (scratch), last block's entry, first block's entry.
// rows (n > 1): x, logits and ctl per row at the stride; each weight row is dotted with every row's x; row r's id
// goes to out_ids[its cursor] (and in_ids[cursor + 1] as above), its cursor and pos advance; no trace.
void lm_head_argmax(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, int32_t* in_ids,
                    int32_t* out_ids, StepCtl* ctl, cudaStream_t s, bool pdl, unsigned long long* trace = nullptr,
                    const Rows& rows = {});

// Step sampler (engine/step_sampler.h has the algorithm and its host reference): penalties from a device token
// table, greedy / top-k / min-p / top-p thresholds found by radix select over the logits' order keys, an
// inverse-CDF draw in id order with Philox(seed, step). 9 kernels; the last writes out_ids[cursor] (and
// host_ids[cursor] when given: mapped pinned memory), feeds in_ids[cursor+1] when cursor+1 >= n_given, adds 1 to
// table[id], advances cursor, pos and the draw counter.
struct SampWork;  // device control + scratch of the step sampler, samp_work_bytes(V) bytes
size_t samp_work_bytes(int V);
struct SampArgs {
  const float* logits = nullptr;  // [V] raw logits (lm_head output)
  float* adj = nullptr;           // [V] scratch: adjusted logits
  uint32_t* table = nullptr;      // [V] bit 31: prompt token, low bits: times generated
  int V = 0;
  SampWork* work = nullptr;
  int32_t* in_ids = nullptr;
  int32_t* out_ids = nullptr;
  int32_t* host_ids = nullptr;    // device pointer of mapped pinned memory, or null
  StepCtl* ctl = nullptr;
  const uint32_t* mask = nullptr; // [ceil(V / 32)] allowed-token bits (bit i % 32 of word i / 32), or null: every
                                  // token; a token not allowed gets the adjusted logit -inf (constrained decoding)
};
// Sets the parameters and the draw counter, clears the accumulators (params copied before it returns).
void samp_init(SampWork* w, const samp::StepParams& params, uint64_t step, cudaStream_t s);
// pdl_first: the first kernel too waits through PDL (false when it starts a graph of its own).
void sample_step(const SampArgs& a, cudaStream_t s, bool pdl, bool pdl_first = true);

// MoE decode, three kernels:
//  router: logits[E] = router . xn, shg[1] = shared-gate . xn (xn = rmsnorm(x) * norm_w); the last block does the
//    top-k routing (softmax over the selected logits) once and writes route_idx[k], route_w[k].
//  gate_up: act[e*I + r] = silu(g)*u for the k routed experts, then the shared expert at act[k*I ..+ Is).
//  down: out += sum_e route_w[e] * down_e . act_e + sigmoid(shg) * sh_down . act_shared.
// Router logits given in parts (MoeArgs::pre): [E + 1][kMoePreStride] floats, element e's parts 0 .. pre_parts-1
// contiguous (e < E the logits', e = E the shared-expert gate's), none scaled by the router input's RMS factor.
constexpr int kMoePreStride = 16, kMoePreMaxParts = 12;
// The part-major layout of the same buffer (MoeArgs::pre_ps > 1): part p of element e at p * kMoePrePartStride + e,
// so a block's threads read each part as one coalesced row ((E + 1) <= kMoePrePartStride; 12 parts fit the buffer).
constexpr int kMoePrePartStride = 264;
// LILY_PROFILE=trace-blocks per-block stamps (MoeArgs::btrace): blocks b < kMoeBtraceBlocks of each MoE kernel,
// kMoeBtraceSlots stamps each. Fused kernel: 0 entry, 1 after pdl_wait, 2 parts summed, 3 routing ranked, 4 first
// routed rows requested, 5 x prologue done, 6 routing published, 7 first routed pair done, 8 block done. Down:
// 0 entry, 1 routing flag seen, 2 rows requested, 3 after pdl_wait, 4 act prologue done, 5 first row done, 8 block
// done.
constexpr int kMoeBtraceBlocks = 512, kMoeBtraceSlots = 10;
struct MoeArgs {
  const float* x = nullptr;        // residual [H] (normed here with norm_w)
  const float* norm_w = nullptr;   // post_attention_layernorm [H]
  float eps = 1e-6f;
  DMat router, shg_w;              // [E, H], [1, H] (same format)
  float* logits = nullptr;         // router logits [E] (scratch written by router)
  float* shg = nullptr;            // shared gate logit [1] (written by router, read by down)
  unsigned int* route_done = nullptr;  // [8] device counters and flags (zero between launches; see the kernels)
  int E = 0, k = 0;
  DStack gate, up, down;           // gate/up [I, H], down [H, I]
  DMat sh_gate, sh_up, sh_down;    // [Is, H], [Is, H], [H, Is]
  float* act = nullptr;            // [k*I + Is]
  int32_t* route_idx = nullptr;    // [k]
  float* route_w = nullptr;        // [k]
  float* out = nullptr;            // residual [H], accumulated by down
  unsigned long long* trace = nullptr;  // LILY_PROFILE=trace: [16] globaltimer stamps (router 0-5, gate_up 6-9, down 10-14; fused: 6-7 last block, down 8-9, 15)
  unsigned long long* trace_x = nullptr;  // LILY_PROFILE=trace: [3] fused x loads landed, x norm reduced, down act landed (b0)
  unsigned long long* trace_end = nullptr;  // LILY_PROFILE=trace: [1] the layer's end (down's last block), every layer
  unsigned long long* btrace = nullptr;   // LILY_PROFILE=trace-blocks: per-block stamps [kMoeBtraceBlocks][slots] of the fused
                                          // kernel, then the same of down (thread 0 of each block; kernels.h)
  int router_xf = 0;               // fused: router blocks quantise x (int8 form) after their barrier arrival (set by
                                   // the launcher where the experts are 4-bit on the int8 x)
  const float* pre = nullptr;      // fused kernel only, E <= 256: the router-from-y form: logits / rms(x) given as
                                   // [E + 1][kMoePreStride] partial sums (no router rows, no barrier), summed in part
                                   // order and ranked by each block; shg[0] is then the RMS factor r of x (written
                                   // by the fused kernel's block 0), and down's shared-expert gate r * element E's sum
  int pre_parts = 0;
  int pre_es = kMoePreStride, pre_ps = 1;  // element and part strides of pre (floats): element-major [E + 1][16], or
                                   // part-major (pre_es 1, pre_ps kMoePrePartStride; the decode step's)
  int early_route = 0;             // set by the caller when down follows the fused kernel: the fused kernel publishes
                                   // the routing through route_done[4] and down reads it before its PDL wait
                                   // (route_done[5]: down blocks past the flag; both left zeroed)
  int stage2_off = 0;              // fused, rows first (set by its launcher where stage2_ok): byte offset of the
                                   // warps' StagedRow buffers in dynamic shared memory; 0: none
  Rows rows;                       // n > 1: n rows in one launch (blockIdx.y = row, each row the grid a single row
                                   // would get): x, logits, shg, route_done, act, route_idx, route_w, out and pre
                                   // per row at the stride; no traces
  int route_packed = 0;            // early_route with 2 <= k <= 8, E <= 256 (set by the launchers): the flag is
                                   // the ids as one word, route_done[6..7] (byte i: id i; nonzero as the ids differ)
                                   // instead of route_done[4], so down issues its rows from the flag's own load; the
                                   // weights read after its wait
};
void moe_router(const MoeArgs& a, cudaStream_t s, bool pdl);
void moe_gate_up(const MoeArgs& a, cudaStream_t s, bool pdl);
void moe_down(const MoeArgs& a, cudaStream_t s, bool pdl);
// router + gate_up as one launch (same results as moe_router then moe_gate_up; barrier on route_done[2..3],
// which must start zeroed and is left zeroed).
void moe_route_gate_up(const MoeArgs& a, cudaStream_t s, bool pdl);

// Gated DeltaNet decode step for one layer (conv + SiLU, l2norm, gates, delta rule on fp32 S, gated RMSNorm).
struct GdnArgs {
  const float* qkv = nullptr;   // raw projections [conv_dim] = q [Hk*Dk] | k [Hk*Dk] | v [Hv*Dv]
  const float* z = nullptr;     // [Hv*Dv]
  const float* b = nullptr;     // [Hv]
  const float* a = nullptr;     // [Hv]
  const float* conv_w = nullptr;// [conv_dim][K]
  const float* dt_bias = nullptr, *a_neg = nullptr;  // [Hv]
  const float* norm_w = nullptr;// [Dv]
  int layer = 0;                // index among the linear layers (state slot)
  int Hk = 0, Hv = 0, Dk = 0, Dv = 0, K = 0;
  float eps = 1e-6f;
  float* y = nullptr;           // [Hv*Dv] gated-normed output (split form: without the RMS factor)
  float* hss = nullptr;         // split form when set: [Hv][gdn_split_parts(Dv)] partial sums of o^2 per head,
                                // for the consumer's HeadNorm {hss, Dv, parts, eps}
  void* yq = nullptr;           // split form only, optional: y written as an XQ image (xq_image_bytes(Hv*Dv))
                                // instead of y, for a 4-bit out_proj on the int8-x path (HeadNorm::xq)
  const StepCtl* ctl = nullptr; // pos, S, conv
  unsigned long long* trace = nullptr;  // LILY_PROFILE=trace: block 0 entry, after wait, rows done [0..2]; last block
                                        // done [3]; block 0 conv done, norms done [7..8] ([4..6]: out_proj's);
                                        // split form: block 0 before its pdl_wait [12], after its StepCtl
                                        // read [29], its pre-wait loads issued [30]
  // Router-from-y's A in blocks of their own after the step's (split form only; ra_rows 0: none): warp w of A-block b dots row 8b + w of ra_m (int16 bits, [ra_rows][ra_cols], times
  // ra_scale[row]) with the layer's raw input ra_x after the PDL wait (final once in_proj has finished) and writes
  // ra_out[row * ra_stride]. ra_cols % 256 == 0, <= 2048. The rows are requested before the wait (after it, the A
  // blocks ended after the step's: measured slower, docs/performance-log.md).
  const uint16_t* ra_m = nullptr;
  const float* ra_scale = nullptr;
  const float* ra_x = nullptr;
  float* ra_out = nullptr;
  int ra_rows = 0, ra_cols = 0, ra_stride = 0;
  // rows (split form, n > 1): n consecutive positions pos .. pos + n - 1 (pos: ctl's) in one launch, the state carried
  // through them on chip: qkv, z, b, a, y, yq, hss, ra_x and ra_out per row at the stride (ctl is row 0's). The
  // state after row i < n - 1 (this layer's S and conv ring, as plain steps would leave them) is written to snapshot
  // slot snap[i], laid out as the state: S at StepCtl::S's offsets, the conv rings from snap[i] + snap_conv floats.
  Rows rows;
  float* snap[kMaxRows - 1] = {};
  int64_t snap_conv = 0;
  unsigned int* qk_read = nullptr;  // rows: [Hk] counters, zero between launches (the blocks that read a key head's
                                    // ring slots count themselves; the block writing them back waits for the count)
};
void gdn_decode(const GdnArgs& g, cudaStream_t s, bool pdl);
int gdn_split_parts(int Dv);  // blocks per value head in the split form (Dv / 32); 0: Dv has no split form

// Gated full attention decode for one layer: q/k RMSNorm, partial NeoX RoPE, KV append (fp16), GQA attention over
// positions 0..pos with split-KV, sigmoid output gate.
struct AttnArgs {
  const float* q = nullptr;     // [nq][2*hd] (query | gate per head)
  const float* k = nullptr;     // [nkv*hd]
  const float* v = nullptr;     // [nkv*hd]
  const float* q_norm = nullptr, *k_norm = nullptr;  // [hd]
  int layer = 0;                // index among the full layers (KV slot)
  int nq = 0, nkv = 0, hd = 0, rope_dim = 0;
  double theta = 1e7;
  float eps = 1e-6f;
  float* part = nullptr;        // scratch [nkv][kAttnPartSlots][G*hd + 2*G] (acc, m, l): splits, then groups
  float* out = nullptr;         // [nq*hd]
  StepCtl* ctl = nullptr;
  int min_split = 64;           // positions per split at least (set by attn_decode)
  int merge_levels = 0;         // 0 (default): the merge spread over the split blocks; 2: groups of kAttnGroup splits
                                // merged first, then the groups; 1: the last block merges all (references for the
                                // tests; attn_decode falls back to 2 where the split blocks cannot all be resident)
  unsigned long long* trace = nullptr;  // LILY_PROFILE=trace: [8] globaltimer stamps of block (0,0) and the last block
};
void attn_decode(const AttnArgs& a, cudaStream_t s, bool pdl);

}  // namespace lily::cuda
