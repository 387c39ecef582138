// CUDA backend (batch-1 decode): the weights live on the device as they are in the checkpoint (MLX 4/8-bit stay
// packed, bf16 stays bf16), everything is allocated at load, and one decode step (embed, 40 layers, lm_head +
// argmax) is captured once as a CUDA graph and replayed per token. Prompts (n > 1) run batched (prefill_runner.h).
// Switches (env): LILY_CUDA_GRAPH=0 launches the kernels directly instead of replaying the graph;
// LILY_CUDA_PDL=0 turns off programmatic dependent launch; LILY_CUDA_SAMPLER=host makes decode_sample run
// forward() per token with host sampling (the Backend default) instead of the device step sampler.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cuda/kernels.h"
#include "engine/backend.h"

namespace lily::cuda {

struct CudaOptions {
  bool graph = true;   // capture the step as a CUDA graph
  bool pdl = true;     // programmatic dependent launch between the step's kernels
  bool profile = false;// LILY_CUDA_PROFILE=1: no graph, events between kernels, per-kernel times printed at exit
  bool device_sampler = true;  // LILY_CUDA_SAMPLER=host: decode_sample samples on the host
  bool prefill = true; // LILY_CUDA_PREFILL=0: prompts run through the decode step token by token
  // LILY_CUDA_PREFILL_MAX_CHUNK: prompt tokens per chunk at most (scratch sized by it); 0: 4096 on devices with
  // >= 40 GiB, else 2048
  int prefill_max_chunk = 0;
  bool prefill_simple = false;  // LILY_CUDA_PREFILL_SIMPLE=1: reference (non-tensor-core) prefill kernels
  int prefill_prec = 1;  // LILY_CUDA_PREFILL_PRECISION=bf16|fp16|split: GEMM operands (prefill.h PrefillPrec), fp16 default
  bool prefill_attn_precise = true;  // LILY_CUDA_PREFILL_ATTN_PRECISE=0: bf16 flash attention in the fp16 modes
  bool fused_router = true;  // LILY_CUDA_FUSED_ROUTER=0: MoE router and gate_up as two launches
  bool early_route = true;   // LILY_CUDA_MOE_EARLY_ROUTE=0: MoE down reads the routing after its PDL wait
  // LILY_CUDA_MOE_ONE_WAVE=1: MoE down inside the fused MoE kernel (moe_one_wave.cuh) where moe_one_wave_ok allows
  // it, from column-blocked copies of the 4-bit down matrices made at load (+1/3 of the experts' memory)
  bool one_wave = false;
  bool ow_int8 = true;  // LILY_CUDA_MOE_OW_INT8=0: the one-wave down on f32 act values (default: int8 hi + lo, dp4a)
  bool gdn_split = true;     // LILY_CUDA_GDN_SPLIT=0: one 1024-thread DeltaNet block per value head (gated norm inside)
  bool gdn_xq = true;        // LILY_CUDA_GDN_XQ=0: the split DeltaNet step writes f32 y, quantised by out_proj (else
                             // its blocks write y's int8 form, an XQ image, where out_proj runs the int8-x path)
  // LILY_CUDA_ROUTER_Y: 1 (default) the router logits summed before the MoE kernel (router-from-y, where the layer's
  // shapes allow it; +1.9% at 4K on the H200, session 13); 0 the router's rows in the MoE kernel; 2 MEASUREMENT ONLY
  // (results wrong): the MoE kernel ranks a stale buffer, no producers
  int router_y = 1;
  // LILY_CUDA_RY_A (with ROUTER_Y=1): i16 (default) A from int16 rows of W_r diag(post_norm) on in_proj's raw x; q:
  // the router's own 8-bit / bf16 rows on the raw x times post_norm (exact A; 1.0% slower at 4K on the H200 than the
  // same rows in f16, session 12)
  bool ry_a_i16 = true;
  // LILY_CUDA_RY_A_AT (with ROUTER_Y=1, RY_A=i16, the split DeltaNet step): gdn (default) in the DeltaNet layers A by
  // blocks of its own in the DeltaNet step's launch (GdnArgs::ra_*; +1.2% at 4K on the H200 against in, session 13);
  // in: A as side rows of in_proj. The attention layers take A as side rows of q/k/v either way.
  bool ry_a_gdn = true;
  bool side_block_sum = false;  // LILY_CUDA_SIDE_BLOCK_SUM=1: B's 8 pieces summed per block into one part
                                // (measured slower on the H200, session 14; default: 8 parts)
  bool pre_part_major = true;  // LILY_CUDA_PRE_PART_MAJOR=0: router-from-y's parts element-major ([E + 1][16])
  bool int8_x = true;  // LILY_CUDA_INT8_X=0: f32 activations in the 4-bit decode GEMVs (else int8 hi+lo, dp4a)
  // LILY_CUDA_SKIP=name,...: MEASUREMENT ONLY (the results are wrong): leaves these kernels out of the decode step
  // (gdn_in, gdn, gdn_out, qkv, attn, o, router, gate_up, down) to time their share inside the graph
  std::string skip;
  bool skips(const char* name) const;
  bool trace = false;  // LILY_CUDA_TRACE=1: globaltimer stamps in the first attention and DeltaNet layers, printed at exit
  bool btrace = false;  // LILY_CUDA_TRACE=2: also per-block stamps of the first DeltaNet layer's two MoE kernels
  static CudaOptions from_env();
};

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
  // router-from-y (LILY_CUDA_ROUTER_Y=1, router_y.h): rows [E + 1]; A on the layer's raw x (ry_pa parts):
  // ry_a (LILY_CUDA_RY_A=i16, default) or ry_r (=q: the router's rows then the shared gate's, a copy in the
  // checkpoint's format, times post_norm); ry_m =
  // W_router diag(post_norm) O as int16 times ry_m_scale on the out projection's x (ry_pm pieces); ry_m null: the
  // layer routes as usual
  DMat ry_r;
  uint16_t* ry_a = nullptr;  // LILY_CUDA_RY_A=i16: [E + 1][H] int16 rows of W_r diag(post_norm), times ry_a_scale
  float* ry_a_scale = nullptr;
  uint16_t* ry_m = nullptr;
  float* ry_m_scale = nullptr;
  int ry_pa = 0, ry_pm = 0;
  bool ry_a_gdn = false;  // A by the DeltaNet step's blocks (one part), not in_proj's side rows
  DColBlk ow_down, ow_sh_down;  // LILY_CUDA_MOE_ONE_WAVE=1, 4-bit down: column-blocked copies (w null: none)
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
                    const std::function<bool(int32_t)>& on_token, float* last_logits = nullptr) override;

  size_t weight_bytes() const { return weight_bytes_; }   // device bytes of weights
  size_t step_weight_bytes() const;                        // weight bytes one decode step reads

  void* dev_alloc(size_t bytes);  // owned by the backend, freed with it
  void dev_free(void* p);

 private:
  DMat upload(const QMatrix& m, const char* what);
  DStack upload_stack(const ExpertStack& s, const char* what);
  void make_ow_down(DLayer& d, int E);
  float* upload_f32(const std::vector<float>& v);
  void enqueue_step(cudaStream_t s, bool sample);
  void gemv_shared_x(GemvSeg* segs, int n, const float* norm_w, cudaStream_t s, unsigned long long* trace = nullptr,
                     const GemvSide* side = nullptr);
  void begin(CudaState& st, int n_given);
  void run_step(bool sample = false);  // sample: lm_head + the device step sampler instead of argmax
  void mark(const char* what);  // profiling: event after the kernel(s) named `what`

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
  void setup_router_y();                  // makes each eligible layer's side rows (opt_.router_y == 1)
  cudaGraphExec_t graph_ = nullptr;       // greedy step
  cudaGraphExec_t graph_samp_ = nullptr;  // sampled step
  std::vector<void*> allocs_;
  size_t weight_bytes_ = 0;

  DMat embed_, lm_head_;
  float* final_norm_ = nullptr;
  std::vector<DLayer> layers_;

  // scratch (device), sizes in elements
  float* x_ = nullptr;          // [H] residual
  float* proj_ = nullptr;       // [max(conv_dim + vd + 2 Hv, 2 nq hd + 2 nkv hd)]
  float* y_ = nullptr;          // [max(vd, nq hd)]
  float* rlogits_ = nullptr;    // [E]
  float* shg_ = nullptr;        // [1]
  float* pre_ = nullptr;        // [E + 1][kMoePreStride] router-from-y partial logits
  float* hss_ = nullptr;        // [lin_v_heads][gdn_split_parts(lin_v_dim)] DeltaNet o^2 partial sums (split form)
  void* yq_ = nullptr;          // [xq_image_bytes(vd)] bytes: y as an XQ image (split form, gdn_xq)
  unsigned int* route_done_ = nullptr;  // router last-block counter
  static constexpr int kTraceSlots = 128;
  unsigned long long* trace_ = nullptr; // [kTraceSlots] LILY_CUDA_TRACE stamps (attention 0-6, its MoE 16-28; first
                                        // DeltaNet layer: in_proj 32-34, gdn 35-38 and 42-43 and 47 and 64-65,
                                        // out_proj 39-41, MoE x prologues 12-14 / 44-46, its MoE 48-63;
                                        // lm_head 66-71; every layer's end 80 + layer)
  unsigned long long* btrace_ = nullptr;  // LILY_CUDA_TRACE=2: [2][kMoeBtraceBlocks][kMoeBtraceSlots] stamps
  void print_trace() const;  // LILY_CUDA_TRACE stamps, at exit
  void print_btrace(unsigned long long base) const;  // the per-block stamps, as quantiles over the blocks
  void print_step_trace(const unsigned long long* t) const;  // per-layer-kind times and the lm_head's
  float* act_ = nullptr;        // [k I + Is]
  float* ow_part_ = nullptr;    // one wave: the fused MoE blocks' partial sums [blocks][H] (moe_ow_part_floats)
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
  static constexpr int kEvents = 4;
  cudaEvent_t ev_[kEvents] = {};
};

}  // namespace lily::cuda
