// `lily quantize`: a loaded checkpoint (BF16, FP8, or any format the loader reads) written as an MLX affine
// checkpoint the way MLX writes it (compact headers, MLX names, `quantization` in config.json), streaming: each
// tensor is quantised row by row from the source's mapped files as it is written, shard by shard. Vision tensors
// are dropped; multi-token-prediction tensors (mtp.*) are copied unchanged.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "model/weights.h"
#include "quant/affine_quant.h"

namespace lily {

struct QuantizeOptions {
  MlxRecipe recipe;
  uint64_t max_shard_bytes = 5000000000ull;
  std::function<void(uint64_t done, uint64_t total)> progress;  // bytes written
};

// Writes `out_dir` from `src` (loaded from `src_dir`, whose config.json and tokenizer files are carried over).
void quantize_checkpoint(const ModelWeights& src, const std::string& src_dir, const std::string& out_dir,
                         const QuantizeOptions& opt);

// Teacher-forced comparison of two models on `n` fixed token ids (deterministic, spread over the vocabulary).
struct KlReport {
  int positions = 0;
  double mean_kl = 0, max_kl = 0, top1 = 0, max_abs = 0;
};
KlReport kl_against(const std::shared_ptr<ModelWeights>& ref, const std::shared_ptr<ModelWeights>& ours,
                    const std::string& backend, int n);

}  // namespace lily
