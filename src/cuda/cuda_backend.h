// CUDA backend (batch-1 decode): the weights live on the device as they are in the checkpoint (MLX 4/8-bit stay
// packed, bf16 stays bf16), everything is allocated at load, and one decode step (embed, 40 layers, lm_head +
// argmax) is captured once as a CUDA graph and replayed per token. Prompts (n > 1) run batched (prefill_runner.h).
// Options: CudaOptions (cuda_options.h), read from the environment once per backend (docs/configuration.md).
#pragma once
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_options.h"
#include "cuda/decode/kernels.h"
#include "cuda/weight_upload.h"
#include "engine/backend.h"

namespace lily::cuda {

// Device copies of one layer's weights (shapes as in model/weights.h).
struct DLayer {
  bool is_full = false;
  float* in_norm = nullptr;     // [H]
  float* post_norm = nullptr;   // [H]
  // Gated DeltaNet
  DMat qkv, z, b, a, out;       // [conv_dim,H] [vd,H] [Hv,H] [Hv,H] [H,vd]
  float* conv_w = nullptr;      // [conv_dim][K]
  float* dt_bias = nullptr;     // [Hv]
  float* a_neg = nullptr;       // [Hv]
  float* gnorm = nullptr;       // [Dv]
  // gated attention
  DMat q, k, v, o;              // [2*nq*hd,H] [nkv*hd,H] [nkv*hd,H] [H,nq*hd]
  float* q_norm = nullptr;      // [hd]
  float* k_norm = nullptr;      // [hd]
  // MoE
  DMat router, shg;             // [E,H], [1,H]
  DStack gate, up, down;        // [E] x [I,H], [I,H], [H,I]
  DMat sh_gate, sh_up, sh_down; // [Is,H] [Is,H] [H,Is]
  int lin_idx = -1, full_idx = -1;  // slot among linear / full layers
  // router-from-y (router_y.h): rows [E + 1]; A on the layer's raw x (ry_pa parts): ry_a; ry_m =
  // W_router diag(post_norm) O as int16 times ry_m_scale on the out projection's x (ry_pm pieces); ry_m null: the
  // layer routes as usual
  uint16_t* ry_a = nullptr;  // [E + 1][H] int16 rows of W_r diag(post_norm), times ry_a_scale
  float* ry_a_scale = nullptr;
  uint16_t* ry_m = nullptr;
  float* ry_m_scale = nullptr;
  int ry_pa = 0, ry_pm = 0;
  bool ry_a_gdn = false;  // A by the DeltaNet step's blocks (one part), not in_proj's side rows
};

class CudaState;
class PrefillRunner;

class CudaBackend : public Backend {
 public:
  CudaBackend(std::shared_ptr<ModelWeights> w, CudaOptions opt);
  ~CudaBackend() override;
  std::string name() const override { return "cuda"; }
  const ModelConfig& config() const override { return cfg_; }
  int default_prefill_chunk() const override;
  std::unique_ptr<SeqState> new_state(int max_ctx) override;
  void fill_context_for_timing(SeqState& st, int n) override;
  void forward(SeqState& st, const int32_t* ids, int n, int n_logits, float* out,
               const ForwardOptions& opt) override;
  void decode_argmax(SeqState& st, int n_steps, int32_t first_id, int32_t* out_ids) override;
  int decode_sample(SeqState& st, StepSampler& sampler, int32_t first_id, int max_steps,
                    const std::function<bool(int32_t)>& on_token, float* last_logits = nullptr,
                    const TokenMaskFn& mask = {}) override;

  size_t weight_bytes() const { return weight_bytes_; }   // device bytes of weights

  // Speculative decoding (cuda_mtp.cpp, cuda_verify.cpp): the MTP block runs through the decode kernels (draft
  // rows) or the prefill runner (run_mtp, the prompt's rows) with its own KV cache in the CudaState; verify runs the
  // rows with plain decoding's numerics (the decode kernels given all rows at once, or consecutive steps) keeping
  // the DeltaNet states after each, accept copies the kept position's states back.
  bool mtp_available() const override { return has_mtp_; }
  std::string mtp_unavailable_reason() const override;
  std::string mtp_default_off_reason() const override;
  void mtp_forward(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                   float* logits, float* hidden_out) override;
  int mtp_rows(const SeqState& st) const override;
  void mtp_truncate(SeqState& st, int rows) override;
  std::unique_ptr<VerifyUndo> verify(SeqState& st, const int32_t* ids, int n, float* logits, float* hidden) override;
  void accept(SeqState& st, VerifyUndo& undo, int m) override;
  // the argmax of each row from the lm_head kernel (no logits copied out)
  std::unique_ptr<VerifyUndo> verify_argmax(SeqState& st, const int32_t* ids, int n, int32_t* ids_out,
                                            float* hidden) override;
  int32_t mtp_argmax(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0,
                     float* hidden_out) override;

  void* dev_alloc(size_t bytes);  // owned by the backend, freed with it
  void dev_free(void* p);

 private:
  DMat upload(const QMatrix& m, const char* what, bool widen8 = false, int refine = kRefineAll);
  // refine: group_refine's decision over these experts (they all take expert 0's form; only expert 0 is described)
  DStack upload_stack(const ExpertStack& s, const char* what, bool widen8, int refine);
  // The refined form every matrix of the stacks and ms can take (the MoE kernels read a group of matrices in one
  // format): kRefineExact where all take their exact zero-point form (exact_form: kQ4Z, or kI8 for 8-bit and widened
  // codes), else kRefineHalf where all take kQ4H (half_form), else kRefineNone.
  static int group_refine(std::initializer_list<const ExpertStack*> st, std::initializer_list<const QMatrix*> ms,
                          bool widen8);
  void log_code8_uploads() const;
  static bool mixed_4_8(std::initializer_list<const QMatrix*> ms);
  float* upload_f32(const std::vector<float>& v);
  DLayer upload_layer(const LayerWeights& L, int& n_lin, int& n_full);
  // What one launch of the step runs: the whole step with argmax or with the step sampler, or its two halves for
  // constrained decoding (the layers and lm_head's logits; then the sampler with the allowed-token mask mask_,
  // uploaded between the two while the layers run).
  enum class StepPart { kArgmax, kSample, kLogits, kSampleMasked };
  static constexpr int kStepParts = 4;
  void enqueue_step(cudaStream_t s, StepPart part);  // the step's launch sequence (decode/cuda_step.cpp)
  void router_y_sides(const DLayer& d, GemvSide& side_a, GemvSide& side_m) const;
  void enqueue_gdn(const DLayer& d, const GemvSide& side_a, const GemvSide& side_m, cudaStream_t s);
  void enqueue_attn(const DLayer& d, const GemvSide& side_a, const GemvSide& side_m, cudaStream_t s);
  void enqueue_moe(const DLayer& d, cudaStream_t s);
  void enqueue_layer(const DLayer& d, cudaStream_t s);  // the mixer (with router-from-y's sides), then the MoE
  int layer_index(const DLayer& d) const;  // d's index in layers_, -1 for another layer (the MTP block's)
  void gemv_shared_x(GemvSeg* segs, int n, const float* norm_w, cudaStream_t s, unsigned long long* trace = nullptr,
                     const GemvSide* side = nullptr);
  void begin(CudaState& st, int n_given);
  void run_step(StepPart part = StepPart::kArgmax);  // enqueued directly or replayed from its graph
  cudaGraphExec_t step_graph(StepPart part);          // captured on first use
  void mark(const char* what);  // profiling: event after the kernel(s) named `what`

  // One decode row's device scratch and step control: the members below are the plain step's set, row 0 of
  // kMaxRows laid out at rows_stride_ (a verify's rows 1 .. n - 1 use the sets after it); the MTP rows have one of
  // their own (mtp_sc_), swapped in while their launches are enqueued.
  struct RowScratch {
    float *x = nullptr, *proj = nullptr, *y = nullptr, *rlogits = nullptr, *shg = nullptr, *pre = nullptr,
          *hss = nullptr;
    void* yq = nullptr;
    unsigned int* route_done = nullptr;
    float* act = nullptr;
    int32_t* ridx = nullptr;
    float *rw = nullptr, *part = nullptr, *logits = nullptr;
    StepCtl* ctl = nullptr;
  };
  // n sets sized for cfg_ from one zeroed allocation, set r at byte offset r * *stride from set 0's (cuda_backend.cpp)
  std::vector<RowScratch> alloc_rows(int n, int64_t* stride = nullptr);
  int64_t rows_stride_ = 0;  // bytes from one verify row's set to the next's
  void swap_scratch(RowScratch& r);    // exchanges the members' set with r
  struct Mark {
    const char* what;
    cudaEvent_t ev;
  };
  std::unique_ptr<PrefillRunner> prefill_;  // batched prefill (n > 1), scratch for opt_.prefill_max_chunk tokens
  std::vector<Mark> marks_;
  std::vector<std::pair<std::string, double>> prof_ms_;  // accumulated per kernel kind
  int prof_steps_ = 0;

  std::shared_ptr<ModelWeights> w_;
  ModelConfig cfg_;
  CudaOptions opt_;
  cudaStream_t stream_ = nullptr;
  void setup_router_y();                  // makes each eligible layer's side rows (opt_.router_y)
  void upload_mtp();                      // the MTP block, when loaded (cuda_mtp.cpp)
  // verify as decode steps: n steps from st.pos, the logits of each to logits [n][V], the final-normed hidden
  // state of each to hidden [n][H] (may be null), the DeltaNet states after each of the first n - 1 to the state's
  // snapshots; st.pos += n
  // ids_out (may be null, as logits): each row's argmax
  void verify_decode_steps(CudaState& st, const int32_t* ids, int n, float* logits, float* hidden, int32_t* ids_out);
  std::unique_ptr<VerifyUndo> verify_rows(SeqState& s, const int32_t* ids, int n, float* logits, float* hidden,
                                          int32_t* ids_out);  // verify / verify_argmax
  bool gdn_split_ = true;                 // the split DeltaNet step (gdn_split_parts(Dv) > 0)
  cudaGraphExec_t graphs_[kStepParts] = {};  // per StepPart, captured on first use
  std::vector<void*> allocs_;
  size_t weight_bytes_ = 0;
  size_t code8_mats_[2] = {}, code8_bytes_[2] = {};  // matrices uploaded as kF8 [0] / kQ6 [1], their device bytes
  int f8_group_ = 0;  // the kF8 matrices' group (columns per scale)
  size_t q4z_mats_ = 0;  // affine 4-bit matrices uploaded as kQ4Z (describe_matrix)
  size_t q4h_mats_ = 0;  // affine 4-bit matrices uploaded as kQ4H (describe_matrix)
  size_t i8z_mats_ = 0;  // affine 8-bit matrices uploaded as kI8 (describe_matrix)
  size_t widened_ = 0;  // affine 4-bit MoE matrices uploaded as 8-bit codes (describe_matrix's widen8)

  DMat embed_, lm_head_;
  float* final_norm_ = nullptr;
  std::vector<DLayer> layers_;
  // the MTP block (has_mtp_): fc [H, 2H], norms [H], its decoder layer (full attention, full_idx 0 of the state's
  // MTP KV cache)
  bool has_mtp_ = false;
  DMat mtp_fc_;
  float *mtp_norm_e_ = nullptr, *mtp_norm_h_ = nullptr, *mtp_norm_ = nullptr;
  DLayer mtp_layer_;
  float* vhid_ = nullptr;       // [kMaxVerifyDecode][H] final-normed hidden rows of a decode-step verify
  static constexpr int kMaxVerifyDecode = 16;
  // The MTP block on up to kMaxVerifyDecode rows (the drafts) through the decode kernels, row by row: the input
  // stage as prefill_rmsnorm_f32 + a GEMV, its layer as a decode step's, mtp.norm, lm_head (cuda_mtp.cpp). Longer
  // runs of rows (the prompt's) go through the prefill runner.
  void mtp_forward_checked(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                           float* logits, float* hidden_out, int32_t* argmax);  // mtp_forward / mtp_argmax
  void mtp_decode_rows(CudaState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                       float* logits, float* hidden_out, int32_t* argmax = nullptr);  // argmax: the last row's
  struct MtpRows {
    int32_t* ids = nullptr;      // [kMaxVerifyDecode + 1] the rows' next tokens (device)
    float* hid = nullptr;        // [kMaxVerifyDecode][H] the rows' hidden states in
    float* cat = nullptr;        // [2H] concat(norm_e(embed), norm_h(hidden)) of the row
    float* hout = nullptr;       // [kMaxVerifyDecode][H] mtp.norm of the rows' outputs
    int32_t* out = nullptr;      // [kMaxVerifyDecode] the rows' argmax (lm_head_argmax's out_ids)
    StepCtl* ctl_host = nullptr; // pinned [kMaxVerifyDecode] the rows' step controls (the MTP KV cache)
  };
  MtpRows mtp_io_;
  RowScratch mtp_sc_;           // the MTP rows' decode scratch (swapped in while they are enqueued)
  // verify's copies of a state's DeltaNet states, each [s_bytes S | conv_bytes conv] (allocated on first use, kept):
  // slot i after i + 1 tokens (i < n - 1). They belong to the undo
  // record of the last verify (snap_ticket_).
  std::vector<float*> snaps_;
  size_t snap_bytes_ = 0;
  uint64_t snap_ticket_ = 0;
  float* snap(size_t i, size_t bytes);  // slot i, grown to i + 1 slots of `bytes`
  void save_states(const CudaState& st, size_t slot);     // S, conv -> snapshot slot (async on stream_)
  void restore_states(CudaState& st, size_t slot);        // snapshot slot -> S, conv (async on stream_)

  // verify as one launch sequence for all rows (cuda_verify.cpp), for 2 .. kMaxRows rows with the step graph on:
  // the decode step's kernels each given the n rows (Rows, their scratch at rows_stride_ from the plain step's):
  // the GEMVs and lm_head dot each weight row with every row's x, the DeltaNet step carries the state through the
  // rows (the states after rows 0 .. n - 2 to snapshot slots), the MoE kernels run the rows side by side on 1/n of
  // the grid each, the attention kernel row after row. Each row computes what a plain step computes, bit for bit.
  // Captured once per n on first use.
  Rows rows_;                                          // the rows of the launches being enqueued (n 1: plain)
  size_t snap_s_bytes_ = 0;                            // S's bytes at the start of a snapshot slot (then the conv)
  unsigned int* qk_read_ = nullptr;                    // [lin_k_heads] the rows' DeltaNet step's counters (zeroed)
  cudaGraphExec_t rows_graphs_[kMaxRows + 1] = {};
  StepCtl* rows_ctl_host_ = nullptr;                   // pinned [kMaxRows] the rows' step controls
  bool rows_ready() const { return opt_.graph && !opt_.profile; }
  cudaGraphExec_t rows_graph(int n);
  void drop_rows_graphs();
  void verify_batch(CudaState& st, const int32_t* ids, int n, float* logits, float* hidden, int32_t* ids_out);

  // scratch (device), sizes in elements
  float* x_ = nullptr;          // [H] residual
  float* proj_ = nullptr;       // [max(conv_dim + vd + 2 Hv, 2 nq hd + 2 nkv hd)]
  float* y_ = nullptr;          // [max(vd, nq hd)]
  float* rlogits_ = nullptr;    // [E]
  float* shg_ = nullptr;        // [1]
  float* pre_ = nullptr;        // [E + 1][kMoePreStride] router-from-y partial logits
  float* hss_ = nullptr;        // [lin_v_heads][gdn_split_parts(lin_v_dim)] DeltaNet o^2 partial sums (split form)
  void* yq_ = nullptr;          // [xq_image_bytes(vd)] bytes: y as an XQ image (split form)
  unsigned int* route_done_ = nullptr;  // router last-block counter
  static constexpr int kTraceSlots = 128;
  unsigned long long* trace_ = nullptr; // [kTraceSlots] LILY_PROFILE=trace stamps (attention 0-6, its MoE 16-28; first
                                        // DeltaNet layer: in_proj 32-34, gdn 35-38 and 42-43 and 47 and 64-65,
                                        // out_proj 39-41, MoE x prologues 12-14 / 44-46, its MoE 48-63;
                                        // lm_head 66-71; every layer's end 80 + layer)
  unsigned long long* btrace_ = nullptr;  // trace 2: [2][kMoeBtraceBlocks][kMoeBtraceSlots] stamps
  void print_trace() const;  // LILY_PROFILE=trace stamps, at exit
  void print_btrace(unsigned long long base) const;  // the per-block stamps, as quantiles over the blocks
  void print_step_trace(const unsigned long long* t) const;  // per-layer-kind times and the lm_head's
  float* act_ = nullptr;        // [k I + Is]
  int32_t* ridx_ = nullptr;     // [k]
  float* rw_ = nullptr;         // [k]
  float* part_ = nullptr;       // attention split partials
  float* logits_ = nullptr;     // [V]
  StepCtl* ctl_ = nullptr;      // device
  StepCtl* ctl_host_ = nullptr; // pinned
  int32_t* in_ids_ = nullptr;   // [kRing + 1]
  int32_t* out_ids_ = nullptr;  // [kRing]
  static constexpr int kRing = 4096;
  // device step sampler
  float* adj_ = nullptr;          // [V] adjusted logits
  uint32_t* table_ = nullptr;     // [V] token table
  SampWork* sw_ = nullptr;
  int32_t* host_ids_ = nullptr;   // [kRing] mapped pinned: ids written by the sampler, read by the host
  int32_t* host_ids_dev_ = nullptr;
  uint32_t* mask_ = nullptr;       // [ceil(V / 32)] device: the allowed-token bits of the step being sampled
  uint32_t* mask_host_ = nullptr;  // [ceil(V / 32)] pinned: filled by the TokenMaskFn, copied to mask_
  static constexpr int kEvents = 4;
  cudaEvent_t ev_[kEvents] = {};
};

}  // namespace lily::cuda
