// Batched prefill of one chunk (up to max_chunk tokens) through the whole model on the device: all scratch is
// allocated once at construction; no host synchronisation inside the chunk (MoE routing stays on the device).
// Writes the same state as the decode kernels (fp16 KV cache, conv ring, fp32 GDN state).
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "cuda/cuda_backend.h"
#include "cuda/common/phase_timer.h"
#include "cuda/prefill/prefill.h"

namespace lily::cuda {

struct PrefillModel {
  const ModelConfig* cfg = nullptr;
  DMat embed, lm_head;
  const float* final_norm = nullptr;
  const std::vector<DLayer>* layers = nullptr;
};

struct PrefillState {
  uint16_t* kv = nullptr;  // [n_full][2][nkv][max_ctx][hd]
  float* S = nullptr;      // [n_lin][Hv][Dv][Dk]
  float* conv = nullptr;   // [n_lin][K][conv_dim]
  int max_ctx = 0;
};

// The multi-token-prediction block for PrefillRunner::run_mtp: fc [H, 2H] (input [embedding half | hidden half]),
// its norms [H], its decoder layer (full attention, full_idx 0: the PrefillState given to run_mtp holds its KV
// cache alone).
struct PrefillMtp {
  DMat fc;
  const float *norm_e = nullptr, *norm_h = nullptr, *norm = nullptr;
  const DLayer* layer = nullptr;
};

class PrefillRunner {
 public:
  static constexpr int kLogitRows = 64;  // lm_head rows per pass
  // chunks of at least this many tokens launch their GEMMs' column tiles first (GemmArgs::rows_first = false):
  // faster from 2K tokens, slower at 256-512 (docs/performance-log.md)
  static constexpr int kColsFirstRows = 2048;
  // simple: the reference (non-tensor-core) GEMM and attention kernels. prec: operand precision of the GEMMs
  // (PrefillPrec; see prefill.h); in the fp16 modes the flash attention is precise (AttnChunkArgs::precise: P in two
  // fp16 parts) where the q/k norm weights keep fp16 Q K^T below saturation. profile: GPU time per phase, printed when the runner is destroyed.
  PrefillRunner(const PrefillModel& m, int max_chunk, const std::function<void*(size_t)>& alloc, bool simple,
                int prec = kPrecFP16, bool profile = false);
  int max_chunk() const { return max_chunk_; }
  int prec() const { return mode_; }
  ~PrefillRunner() { timer_.report("prefill profile (LILY_PROFILE=1)"); }
  // Consumes ids (host) [0, n) at positions pos0.. (n <= max_chunk); logits of chunk rows [n - n_logits, n) to
  // out (host, [n_logits][vocab]). Synchronises the stream only when logits are copied out.
  // hidden_out (host [n][H], optional; needs set_mtp): every row's hidden state after the final norm, in f32.
  void run(const PrefillState& st, const int32_t* ids, int n, int pos0, int n_logits, float* out, cudaStream_t s,
           float* hidden_out = nullptr);
  // Multi-token prediction (prefill_mtp.cpp). set_mtp keeps the block and allocates its scratch for max_chunk rows.
  void set_mtp(const PrefillMtp& m, const std::function<void*(size_t)>& alloc);
  // The MTP block on n rows at positions pos0..: x = fc(concat(norm_e(embed(ids[i])), norm_h(hidden[i]))) (hidden:
  // host [n][H]), its decoder layer over st's KV cache, mtp.norm; logits of the last n_logits rows to logits (host
  // [n_logits][V]), the normed rows to hidden_out (host [n][H], may be null). Synchronises the stream.
  void run_mtp(const PrefillState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
               float* logits, float* hidden_out, cudaStream_t s);

 private:
  void gdn_layer(const DLayer& d, const PrefillState& st, int n, int pos0, cudaStream_t s);
  void attn_layer(const DLayer& d, const PrefillState& st, int n, int pos0, cudaStream_t s);
  void moe_layer(const DLayer& d, int n, cudaStream_t s);
  // The GEMMs of a layer by role: kPrecMixed rounds the operands of some roles to fp16 (kMixedSplitRoles).
  enum GemmRole : int {
    kRoleGdnProj = 0,  // DeltaNet in_proj qkv and z
    kRoleGdnBA,        // DeltaNet in_proj b and a (beta, decay)
    kRoleAttnProj,     // attention q, k, v
    kRoleOut,          // DeltaNet out_proj, attention o_proj
    kRoleRouter,       // router and shared-expert gate
    kRoleGateUp,       // routed experts gate+up
    kRoleDown,         // routed experts down
    kRoleShGateUp,     // shared expert gate+up
    kRoleShDown,       // shared expert down
    kRoleHead,         // lm_head
    kRoles
  };
  // RMSNorm(x_ rows; norm) of the last n_logits of n rows -> lm_head -> out (host); f32 normed rows of all n to
  // hidden_out (host) when set
  void head(const float* norm, int n, int n_logits, float* out, float* hidden_out, cudaStream_t s);
  // kPrecMixed: the roles whose fp16 rounding moved the logits most (docs/cuda-prefill.md, per-role measurement)
  // keep split operands; the routed and shared experts and the lm_head take fp16 ones.
  static constexpr unsigned kMixedSplitRoles =
      1u << kRoleGdnProj | 1u << kRoleGdnBA | 1u << kRoleAttnProj | 1u << kRoleOut | 1u << kRoleRouter;
  void gemm(const ActRows& A, int lda, int M, const DMat& W, float* C, int ldc, int mode, int role, cudaStream_t s);
  void set_a(GemmArgs& g, const ActRows& A, int role) const;
  // f32 rows in stage_ -> operand rows dst (no-op in bf16 mode, where the producers write bf16 directly)
  void to_act(int n, int K, const ActRows& dst, cudaStream_t s);

  PrefillModel m_;
  int max_chunk_ = 0, max_tiles_ = 0, P_ = 0;
  bool simple_ = false;
  int prec_ = kPrecFP16;         // the operand rows' precision (kPrecSplit for kPrecMixed)
  int mode_ = kPrecFP16;         // the PrefillPrec asked for
  bool rows_first_ = false;     // this chunk's GEMM grid order (GemmArgs::rows_first): chunk < kColsFirstRows
  unsigned split_roles_ = ~0u;  // operand rows in split: the roles whose GEMMs use both parts (the others: hi only)
  std::vector<char> attn_precise_;  // per layer: fp16 Q K^T is safe (RMSNorm bound of q/k below fp16 range)
  int32_t* ids_ = nullptr;
  float *x_ = nullptr, *proj_ = nullptr, *cbuf_ = nullptr, *obuf_ = nullptr, *rl_ = nullptr, *sg_ = nullptr;
  float *rw_ = nullptr, *yd_ = nullptr, *shd_ = nullptr, *logits_ = nullptr;
  float* gdn_ws_ = nullptr;  // chunked GDN scratch (prefill_gdn_ws_floats)
  int tile_rows(int n) const;  // grouped GEMM tile rows for a chunk of n tokens
  // the chunked GDN delta rule on tensor cores for chunks of >= kGdnTcMinN tokens where the device fits it and the
  // precision is fp16 or bf16; else (and for shorter chunks) the sequential scan
  bool gdn_tc_ = false;
  float* stage_ = nullptr;  // precise modes: f32 outputs of GDN / attention / SiLU*mul before to_act
  ActRows xa_, ya_, acta_, sacta_;  // GEMM operands: normed x, mixer output, expert and shared activations
  uint16_t* qb_ = nullptr;
  int32_t *ridx_ = nullptr, *counts_ = nullptr, *fill_ = nullptr, *tiles_ = nullptr, *ntiles_ = nullptr;
  int32_t *row_token_ = nullptr, *slot_row_ = nullptr;
  PhaseTimer timer_;  // GPU time per phase (profile)
  // multi-token prediction (set_mtp): the block, fp16 Q K^T safe for its layer, scratch [max_chunk] rows of the
  // uploaded hidden states [H] f32, the concatenated input [2H] f32 and as operand rows, the normed output [H] f32
  PrefillMtp mtp_;
  bool mtp_precise_ = false;
  float *hid_ = nullptr, *cat_ = nullptr, *hout_ = nullptr;
  ActRows cata_;
};

}  // namespace lily::cuda
