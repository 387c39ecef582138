// ModelWeights from a GGUF file of llama.cpp's `qwen35moe` architecture (single or split files).
//
// What llama.cpp's converter changed, undone or taken as is here:
//  - names: token_embd, output_norm, output, blk.N.{attn_norm, post_attention_norm, attn_q/k/v/output,
//    attn_q_norm/k_norm, attn_qkv (in_proj_qkv), attn_gate (in_proj_z), ssm_beta (in_proj_b), ssm_alpha
//    (in_proj_a), ssm_conv1d, ssm_dt.bias (dt_bias), ssm_a, ssm_norm, ssm_out, ffn_gate_inp (router),
//    ffn_{gate,up,down}_exps (experts stacked [E, out, in]; ffn_gate_up_exps fused, gate rows first),
//    ffn_{gate,up,down}_shexp, ffn_gate_inp_shexp (shared-expert gate, 1-D)};
//  - RMSNorm weights are stored with the +1 already added (lily's folded form), except ssm_norm (plain);
//  - ssm_a holds -exp(A_log) (lily's a_neg); ssm_conv1d is [C, K] (channel-major, as lily's conv);
//  - with fewer key than value heads, the value heads are stored "tiled" (v-head j of k-group g at position
//    j*Hk + g) instead of grouped (g*r + j): rows of attn_qkv's V part, attn_gate, ssm_beta, ssm_alpha, ssm_a,
//    ssm_dt, conv1d's V channels and ssm_out's columns are put back in grouped order here;
//  - blocks past block_count - nextn_predict_layers (multi-token prediction) are ignored.
// Weights: F32/F16/BF16 matrices point into the mapping; Q4_0/Q4_1/Q4_K are repacked exactly to 4-bit affine
// (group 32), Q5_0/Q5_1/Q5_K/Q8_0/Q8_K exactly to 8-bit affine (group 32); Q4_K / Q5_K keep their scales and
// mins as stored (KS8 scales, core/dtype.h), the others get f32 scales; Q6_K stays in its own blocks
// (QMatrix::Kind::Ggml, decoded a row at a time in the CPU kernels; dequantised to F32 only where the value-head
// column reorder of ssm_out splits its 256-wide blocks). The load log (stderr) says which tensors went where.
#pragma once
#include <memory>
#include <string>

#include "model/weights.h"

namespace lily {

// True when `path` names a GGUF file (by its extension).
bool is_gguf_path(const std::string& path);

// Throws lily::Error naming the file and the key or tensor on any problem.
std::shared_ptr<ModelWeights> load_model_gguf(const std::string& path);
class GgufModel;
// The same from a GGUF already opened (e.g. made in memory); the weights keep `model` alive.
std::shared_ptr<ModelWeights> load_model_gguf(std::shared_ptr<const GgufModel> model);

// The ModelConfig a GGUF file's metadata describes (qwen35moe.* keys).
ModelConfig gguf_model_config(const GgufModel& m);

}  // namespace lily
