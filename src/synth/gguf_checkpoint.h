// Writes a ModelWeights as a llama.cpp-style qwen35moe GGUF file (what `lily synth --gguf` makes): the
// converter's layout (tensor names, +1-folded norms as stored in ModelWeights, ssm_a = a_neg, value heads in
// tiled order, experts as ffn_{gate,up,down}_exps) and a Q4_K_M-like type mix as llama-quantize chooses it:
// Q6_K for output.weight and, on the "more bits" layers (first and last eighth, every third in between), for
// attn_v and ffn_down_exps / ffn_down_shexp; Q4_K for the other matrices; F32 for norms, conv, router and
// shared-expert gate; Q8_0 for a matrix whose rows are not a multiple of 256. Tensors are streamed in windows of rows
// (dequantised, reordered, quantised on all cores, written while the next window is quantised), so the full-size
// model is written without holding it in memory.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "model/weights.h"

namespace lily {

class GgufWriter;

// qwen35moe.* hyper-parameters of `c` (plus general.architecture and tokenizer.ggml.eos_token_id).
void gguf_add_model_metadata(const ModelConfig& c, GgufWriter& w);

void write_gguf_checkpoint(const ModelWeights& w, const std::string& path, const std::string& tokenizer_json,
                           const std::function<void(uint64_t done, uint64_t total)>& progress = {});
// The same file's bytes in memory (one allocation of the file's size).
std::vector<uint8_t> gguf_checkpoint_bytes(const ModelWeights& w, const std::string& tokenizer_json,
                                           const std::function<void(uint64_t done, uint64_t total)>& progress = {});

// The tokenizer.json `lily synth --gguf` embeds for `preset` (`vocab`: the model's vocab_size).
std::string synthetic_gguf_tokenizer(const std::string& preset, int vocab);

}  // namespace lily
