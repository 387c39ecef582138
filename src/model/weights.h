// Views of the model's weights as the forward pass uses them. Big matrices point into the memory-mapped
// checkpoint (never expanded); small 1-D tensors (norms, gates' constants, conv taps) are decoded to f32
// at load, with the zero-centred norms' +1 folded in so every backend uses y = x/rms * w.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/config.h"

namespace lily {

// A weight matrix W [rows=out, cols=in], y = W x.
//  Dense: `w` points to rows*cols elements of `dtype` (BF16, F16 or F32), row-major.
//  Affine (MLX): `w` points to [rows, cols*bits/8] bytes, each row a little-endian bit stream (element j in bits
//    [j*bits, (j+1)*bits) of the row, which for 2/4/8 bits is element k of a u32 word in bits [k*bits, ...)),
//    `scales`/`biases` to [rows, cols/group] of `sdtype` (BF16/F16/F32, or KS8 for GGUF K-quants: each row a
//    whole number of 8-scale blocks, scale_bytes(sdtype, cols/group) bytes); w = scale*q + bias per group. After
//    loading, bits is 4 or 8 (other MLX widths are repacked to 8 at load); dequant_row reads 2..8 (not 7).
//  Fp8Block: `w` points to rows*cols F8_E4M3 bytes (dtype F8_E4M3), `scales` to [ceil(rows/group),
//    ceil(cols/group)] of `sdtype` (F32/BF16) block scales (weight_scale_inv); w = fp8 * scale of its block.
//  Ggml: `w` points to [rows, row_bytes()] of GGUF quantisation blocks of type `gtype` (the GGUF types that do
//    not map onto the affine form, e.g. Q6_K), decoded a row at a time by the GGUF row decoder (exact).
struct QMatrix {
  enum class Kind { Dense, Affine, Fp8Block, Ggml };
  Kind kind = Kind::Dense;
  DType dtype = DType::BF16;   // Dense element type (F8_E4M3 for Fp8Block)
  DType sdtype = DType::BF16;  // Affine scale/bias type, Fp8Block scale type
  const void* w = nullptr;
  const void* scales = nullptr;
  const void* biases = nullptr;
  int bits = 0;     // Affine: 4 or 8 after loading
  int group = 0;    // Affine: 32, 64 or 128; Fp8Block: the block edge (128)
  uint32_t gtype = 0;  // Ggml: the GgmlType id of the blocks
  int64_t rows = 0, cols = 0;

  bool valid() const { return w != nullptr && rows > 0 && cols > 0; }
  size_t row_bytes() const;     // bytes of one row of `w`
  size_t bytes() const;         // all bytes read for a full GEMV (w + scales + biases)
  std::string format_name() const;  // "BF16", "affine 4-bit group 64", "FP8 e4m3 128x128 blocks"
};

// A stack of E matrices of the same shape, one per expert.
struct ExpertStack {
  std::vector<QMatrix> e;       // [n_experts]
};

struct LinearAttnWeights {      // Gated DeltaNet
  QMatrix in_qkv;               // [conv_dim, H]
  QMatrix in_z;                 // [value_dim, H]
  QMatrix in_b;                 // [Hv, H]
  QMatrix in_a;                 // [Hv, H]
  std::vector<float> conv;      // [conv_dim][K] (tap K-1 multiplies the current input)
  std::vector<float> dt_bias;   // [Hv]
  std::vector<float> a_neg;     // [Hv] = -exp(A_log)
  std::vector<float> norm;      // [Dv] gated RMSNorm weight (plain, never +1)
  QMatrix out;                  // [H, value_dim]
};

struct FullAttnWeights {
  QMatrix q;                    // [2*nq*hd, H] per head [query hd | gate hd]
  QMatrix k;                    // [nkv*hd, H]
  QMatrix v;                    // [nkv*hd, H]
  QMatrix o;                    // [H, nq*hd]
  std::vector<float> q_norm;    // [hd] (+1 folded)
  std::vector<float> k_norm;    // [hd] (+1 folded)
};

struct MoeWeights {
  QMatrix router;               // [E, H]
  ExpertStack gate, up;         // each e: [I, H]
  ExpertStack down;             // each e: [H, I]
  QMatrix sh_gate, sh_up;       // [Is, H]
  QMatrix sh_down;              // [H, Is]
  QMatrix sh_gate_w;            // [1, H] shared-expert sigmoid gate
};

struct LayerWeights {
  bool is_full = false;
  std::vector<float> in_norm;   // [H] (+1 folded)
  std::vector<float> post_norm; // [H] (+1 folded)
  LinearAttnWeights lin;        // when !is_full
  FullAttnWeights attn;         // when is_full
  MoeWeights moe;
};

// The multi-token-prediction block (`mtp.*`): x = fc(concat(RMSNorm(embed(next_id); pre_norm_e),
// RMSNorm(h; pre_norm_h))), one full-attention MoE decoder layer (its own KV cache), RMSNorm(.; norm), then the main
// model's lm_head. h is the main model's hidden state after its final norm (or, chained, the previous MTP step's
// output after `norm`).
struct MtpWeights {
  QMatrix fc;                   // [H, 2H] (input [embedding half | hidden half])
  std::vector<float> pre_norm_e;// [H] (+1 folded)
  std::vector<float> pre_norm_h;// [H] (+1 folded)
  std::vector<float> norm;      // [H] (+1 folded)
  LayerWeights layer;           // is_full = true
  std::string source;           // the directory the tensors came from
};

class CheckpointFiles;  // io/safetensors.h

struct ModelWeights {
  ModelConfig cfg;
  std::string layout;           // "hf-bf16", "hf-text", "mlx-affine", "hf-fp8", "hf-awq", "hf-gptq", ...
  QMatrix embed;                // [V, H] (rows read one at a time)
  QMatrix lm_head;              // [V, H]
  std::vector<float> final_norm;// [H] (+1 folded)
  std::vector<LayerWeights> layers;
  std::vector<std::shared_ptr<const void>> keep_alive;  // mappings / owned buffers the views point into
  std::vector<std::string> load_notes;  // what loading did beyond mapping (realigned shards, repacked formats)
  std::vector<std::string> mtp_tensors; // multi-token-prediction tensors found (mtp.* / language_model.mtp.*)
  std::shared_ptr<const MtpWeights> mtp;// the loaded MTP block (load_mtp), null when not loaded
  std::shared_ptr<const CheckpointFiles> checkpoint;  // the checkpoint's files (null for synthetic models)
  std::string source_dir;               // the checkpoint directory
};

// Loads config.json + safetensors (single file or sharded with index) from a directory.
// Throws lily::Error naming file, tensor, expected and actual on any problem.
std::shared_ptr<ModelWeights> load_model(const std::string& dir);

// Loads the MTP block into w->mtp: from `dir` when not empty (another checkpoint of the same model, e.g. the official
// release for a conversion that dropped it: only the files holding `mtp.*` are opened, through the index), else from
// the model's own checkpoint. Names `mtp.` / `model.mtp.` / `language_model.mtp.` / `model.language_model.mtp.`;
// experts fused, stacked (MLX) or one tensor per expert; any matrix format the main loader reads. Throws lily::Error
// naming the tensor, expected and found shapes when a tensor is missing or mismatched.
void load_mtp(ModelWeights& w, const std::string& dir = "");

// Decodes one row of a matrix to f32 (reference path; out has cols entries).
void dequant_row(const QMatrix& m, int64_t row, float* out);

// Code j of a row of `bits`-bit codes stored as a little-endian bit stream (MLX's packing for every width).
inline uint32_t affine_code(const uint8_t* row, int bits, int64_t j) {
  const uint64_t bit = uint64_t(j) * uint64_t(bits);
  const uint8_t* p = row + bit / 8;
  const uint32_t two = uint32_t(p[0]) | (((bit % 8) + uint64_t(bits) > 8) ? uint32_t(p[1]) << 8 : 0u);
  return (two >> (bit % 8)) & ((1u << bits) - 1u);
}

}  // namespace lily
