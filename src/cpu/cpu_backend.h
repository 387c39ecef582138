// CPU backend: runs the model in f32 on weights decoded on the fly (bf16 / 4-bit / 8-bit).
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "cpu/phase_profile.h"
#include "cpu/cpu_state.h"
#include "engine/backend.h"

namespace lily {

class CpuBackend final : public Backend {
 public:
  CpuBackend(std::shared_ptr<ModelWeights> w, const CpuKernels& k);
  // "cpu-ref", or the fast sets with the SIMD tier that runs them: "cpu-fast-avx512", "cpu-fast-avx2", "cpu-fast-portable"
  std::string name() const override;
  const ModelConfig& config() const override { return w_->cfg; }
  std::unique_ptr<SeqState> new_state(int max_ctx) override;
  void fill_context_for_timing(SeqState& st, int n) override;
  void forward(SeqState& st, const int32_t* ids, int n, int n_logits, float* out,
               const ForwardOptions& opt) override;

  bool mtp_available() const override { return w_->mtp != nullptr; }
  // One draft: a verify of k + 1 positions reads about k + 1 times the experts' bytes (few are shared on random
  // routing), so on a bandwidth-bound CPU k = 1 pays best (docs/performance-log.md).
  int mtp_default_drafts() const override { return 1; }
  std::string mtp_unavailable_reason() const override;
  void mtp_forward(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                   float* logits, float* hidden_out) override;
  int mtp_rows(const SeqState& st) const override;
  void mtp_truncate(SeqState& st, int rows) override;
  // The forward of the n tokens keeps each DeltaNet layer's state after each of the first n - 1 (GdnSnaps); accept(m)
  // copies the one after m tokens back and truncates the KV rows (the last verify's record only).
  std::unique_ptr<VerifyUndo> verify(SeqState& st, const int32_t* ids, int n, float* logits, float* hidden) override;
  void accept(SeqState& st, VerifyUndo& undo, int m) override;

  // Reference twin of the CUDA backend's KV cache (tests only): K and V rows rounded to fp16 (saturated at +-65504)
  // when they are stored, as the device cache stores them (off: f32 rows, the transformers reference's precision).
  bool kv_f16 = false;

  // Debug hook: called with the residual stream [n, hidden] after the embedding (layer -1), after each
  // layer (0..L-1) and after the final norm (layer L). Used by tests to bisect a mismatch layer by layer.
  std::function<void(int layer, const float* x, int n)> on_hidden;

 private:
  void forward_chunk(CpuState& st, const int32_t* ids, int n, int n_logits, float* out,
                     const ForwardOptions& opt);
  // A verify's rewind points in one DeltaNet layer: the state after each of its first snap_rows_ tokens.
  struct GdnSnaps {
    std::vector<float> S;     // [snap_rows_][Hv][Dv][Dk]
    std::vector<float> conv;  // [snap_rows_][K-1][conv_dim]
  };
  // x [n, H] (residual stream) through one decoder layer; h, a: scratch [n, H]; snap: the layer's rewind points
  // while a verify forwards (else null).
  void run_layer(const LayerWeights& L, CpuLayerState& s, float* x, float* h, float* a, int n, int pos0, int max_ctx,
                 GdnSnaps* snap = nullptr);
  void gdn_layer(const LayerWeights& L, CpuLayerState& s, const float* h, int n, int pos0, GdnSnaps* snap, float* out);
  void attn_layer(const LayerWeights& L, CpuLayerState& s, const float* h, int n, int pos0, int max_ctx, float* out);
  void moe_layer(const MoeWeights& m, const float* h, int n, float* out);

  // Scratch buffers, one per use; each grows to the largest chunk seen and is then reused (no allocation
  // per token in steady state).
  enum Slot { kX, kH, kA, kM, kZ, kB, kAg, kY, kConv, kO, kG, kBeta, kQG, kK, kV, kQ, kLogits, kSg, kGe, kUe,
              kXe, kYe, kMtpIn, kSlots };
  float* buf(Slot s, size_t n);
  std::vector<float> bufs_[kSlots];
  std::vector<int> route_idx_, route_perm_, route_pos_, expert_off_, fill_;  // MoE routing of the current chunk
  std::vector<float> route_w_;
  std::vector<fast::MatJob> jobs_;  // batched expert products of the current chunk

  std::vector<GdnSnaps> snaps_;  // [n_layers] (attention layers: empty); grow-only
  int snap_rows_ = 0;            // rewind points the forward in progress keeps (0: none)
  int snap_pos0_ = 0;            // the verify's first position
  uint64_t snap_ticket_ = 0;     // verifies so far; an undo record holds its own (accept checks it)

  std::shared_ptr<ModelWeights> w_;
  const CpuKernels& k_;
  PhaseProfile prof_;  // LILY_PROFILE=1: seconds per phase, printed when the backend is destroyed
};

}  // namespace lily
