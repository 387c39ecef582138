// WeightReader: fetches the tensors a model needs from a checkpoint, checking presence, exact shape, dtype and
// alignment, and builds QMatrix views (dense or MLX affine) and f32 vectors. Remembers what it used so that
// leftover tensors can be reported.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_set>
#include <vector>

#include "io/safetensors.h"
#include "model/quant_config.h"
#include "model/weights.h"

namespace lily {

class WeightReader {
 public:
  WeightReader(const CheckpointFiles& files, const QuantConfig& quant) : files_(files), quant_(quant) {}

  bool has(const std::string& name) const { return files_.find(name) != nullptr; }

  // The tensor `name` with exactly `shape` and one of `allowed` dtypes (throws naming file, tensor, expected, found).
  const TensorView& tensor(const std::string& name, const std::vector<int64_t>& shape,
                           std::initializer_list<DType> allowed);

  // A small float tensor (F32/BF16/F16) decoded to f32, `add` added to every element.
  std::vector<float> vec_f32(const std::string& name, const std::vector<int64_t>& shape, float add = 0.0f);

  // Matrix [rows, cols] stored under `module`: dense `module.weight` (BF16/F16/F32) or MLX affine
  // `module.{weight,scales,biases}` with bits/group from the config (cross-checked with the shapes).
  QMatrix matrix(const std::string& module, int64_t rows, int64_t cols);

  // E matrices stacked in one tensor: `weight_name` is [E, total_rows, cols] (dense) or, when
  // `module.scales` exists, affine [E, total_rows, cols*bits/32]. Returns, per expert, the view of rows
  // [row_begin, row_begin + rows).
  ExpertStack stacked(const std::string& module, const std::string& weight_name, int64_t n, int64_t total_rows,
                      int64_t cols, int64_t row_begin, int64_t rows);

  // Warns on stderr about tensors never used, except those under `ignored` prefixes.
  void warn_unused(const std::vector<std::string>& ignored) const;

 private:
  std::vector<QMatrix> views(const std::string& module, const std::string& weight_name, int64_t n,
                             int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows);

  const CheckpointFiles& files_;
  const QuantConfig& quant_;
  std::unordered_set<std::string> used_;
};

}  // namespace lily
