// Writes a ModelWeights as a checkpoint directory a loader can read: config.json (+ generation_config.json),
// sharded model-XXXXX-of-YYYYY.safetensors with model.safetensors.index.json, and a synthetic tokenizer.json.
//  "mlx-4bit": the MLX-community layout (language_model.model.*, switch_mlp stacks, .weight/.scales/.biases,
//              norms stored +1-folded, conv1d [C, K, 1], config `quantization` with 8-bit router overrides).
//  "hf-bf16":  the official Hugging Face layout (model.language_model.*, lm_head.weight, fused
//              experts.gate_up_proj [E, 2I, H] / experts.down_proj [E, H, I]); matrices dequantised to BF16,
//              zero-centred norms stored as w - 1, conv1d [C, 1, K].
// A_log is stored F32 (as in Qwen3.5) = log(-a_neg).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/weights.h"
#include "io/safetensors_writer.h"
#include "quant/affine_quant.h"

namespace lily {

struct CheckpointOptions {
  std::string layout = "mlx-4bit";            // "mlx-4bit" (MLX layout, bits from `recipe`) or "hf-bf16"
  MlxRecipe recipe;                           // mlx-4bit: bits and group per module
  SafetensorsStyle style = SafetensorsStyle::Padded;  // Mlx: shards written as MLX writes them
  uint64_t max_shard_bytes = 4000000000ull;   // a shard holds one tensor at least
  int bpe_vocab = 0;                          // tokenizer BPE size; 0: vocab rounded down to 4096 multiple
  // Set: config.json is this (with `quantization` / `quantization_config` replaced for mlx-4bit), and the
  // tokenizer / generation files are copied from `copy_files_from`, instead of the synthetic ones.
  const nlohmann::ordered_json* base_config = nullptr;
  std::string copy_files_from;
  std::vector<TensorOut> extra;               // tensors written after the model's (e.g. mtp.* passed through)
};

void write_checkpoint(const ModelWeights& w, const std::string& dir, const CheckpointOptions& opt,
                      const std::function<void(uint64_t done, uint64_t total)>& progress = {});

// The tensors of each layout, in file order (producers read `w`, which must outlive them).
// mlx: each module at the recipe's bits and group (matrices already in that form are copied, others quantised
// row by row as they are written, so a source held in mapped files is streamed).
std::vector<TensorOut> mlx_tensors(const ModelWeights& w, const MlxRecipe& recipe = {});
std::vector<TensorOut> hf_bf16_tensors(const ModelWeights& w);

// The MLX `quantization` entry for a recipe: base {group_size, bits, mode}, plus each module that differs.
nlohmann::ordered_json mlx_quantization(const ModelConfig& c, const MlxRecipe& recipe);

// config.json for the model (text_config nested; `quantized` adds quantization/quantization_config).
nlohmann::ordered_json checkpoint_config(const ModelConfig& c, bool quantized, int bpe_vocab);

// Splits tensors into shards of at most max_bytes (greedy, in order); returns the shard index of each tensor.
std::vector<int> assign_shards(const std::vector<TensorOut>& ts, uint64_t max_bytes, int* n_shards);

}  // namespace lily
