// The list of weight tensors of a qwen3_5_moe text model with their MLX checkpoint names, shapes and
// quantisation, and where each lives in ModelWeights. Shared by the synthetic generator and the writers.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/weights.h"

namespace lily {

enum class MatSlot {
  Embed, LmHead,
  LinQkv, LinZ, LinB, LinA, LinOut,
  AttnQ, AttnK, AttnV, AttnO,
  Router, ShGateW, ShGate, ShUp, ShDown,
  ExpGate, ExpUp, ExpDown,
};

// One quantised module: `count` matrices of [rows, cols] (count = n_experts for switch_mlp stacks, else 1).
struct ModuleSpec {
  std::string name;   // MLX module path without suffix, e.g. "language_model.model.layers.0.mlp.gate"
  MatSlot slot;
  int layer = -1;     // -1 for embed / lm_head
  int64_t rows = 0, cols = 0;
  int count = 1;
  int bits = 4;
  int group = 64;
  float gain = 1.0f;  // synthetic weights have std ~ gain / sqrt(cols)

  size_t w_bytes() const { return size_t(count) * size_t(rows) * size_t(cols) * size_t(bits) / 8; }
  size_t sb_bytes() const { return size_t(count) * size_t(rows) * size_t(cols / group) * 2; }  // scales (= biases)
};

enum class VecSlot { InNorm, PostNorm, FinalNorm, QNorm, KNorm, LinNorm, Conv, DtBias, ALog };

// One small f32 vector (stored BF16 in checkpoints, except A_log which is stored F32).
struct VectorSpec {
  std::string name;             // full MLX tensor name, e.g. "...layers.0.linear_attn.conv1d.weight"
  VecSlot slot;
  int layer = -1;
  std::vector<int64_t> shape;   // MLX checkpoint shape (conv1d: [C, K, 1])
  int64_t numel() const;
};

std::vector<ModuleSpec> plan_modules(const ModelConfig& c);   // checkpoint order: per layer, then globals
std::vector<VectorSpec> plan_vectors(const ModelConfig& c);
// An empty ModelWeights with cfg's layers and expert slots, ready for slot_matrix / slot_vector to fill.
std::shared_ptr<ModelWeights> empty_model(const ModelConfig& cfg, const std::string& layout);

QMatrix& slot_matrix(ModelWeights& w, const ModuleSpec& m, int index);
const QMatrix& slot_matrix(const ModelWeights& w, const ModuleSpec& m, int index);
std::vector<float>& slot_vector(ModelWeights& w, const VectorSpec& v);
const std::vector<float>& slot_vector(const ModelWeights& w, const VectorSpec& v);

// Bytes of one matrix as stored (QMatrix::bytes: w + scales + biases, dense elements, FP8 / GGUF blocks).
size_t qmatrix_bytes(const QMatrix& m);

}  // namespace lily
