// WeightReader: fetches the tensors a model needs from a checkpoint, checking presence, exact shape and dtype,
// and builds QMatrix views (dense, MLX affine, FP8 block-scaled) and f32 vectors. Tensors whose data is not
// aligned to their element size are copied into owned aligned memory; formats the kernels do not run directly
// are repacked losslessly into owned memory (MLX 2/3/5/6-bit -> 8-bit codes; GPTQ, AWQ and compressed-tensors
// int4 -> affine 4-bit group 64). Remembers what it used, copied and repacked, for the load log.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
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

  // Matrix [rows, cols] stored under `module`: dense `module.weight` (BF16/F16/F32); MLX affine
  // `module.{weight,scales,biases}` with bits/group from the config (cross-checked with the shapes); FP8
  // `module.{weight,weight_scale_inv}`; GPTQ/AWQ `module.{qweight,qzeros,scales}`; compressed-tensors
  // `module.{weight_packed,weight_scale[,weight_zero_point]}`.
  QMatrix matrix(const std::string& module, int64_t rows, int64_t cols);

  // E matrices stacked in one tensor: `weight_name` is [E, total_rows, cols] (dense) or, when
  // `module.scales` exists, affine [E, total_rows, cols*bits/32]. Returns, per expert, the view of rows
  // [row_begin, row_begin + rows).
  ExpertStack stacked(const std::string& module, const std::string& weight_name, int64_t n, int64_t total_rows,
                      int64_t cols, int64_t row_begin, int64_t rows);

  // Warns on stderr about tensors never used, except those under `ignored` prefixes.
  void warn_unused(const std::vector<std::string>& ignored) const;

  // What loading did beyond mapping, one line each (realigned shards, copied tensors, repacked formats).
  std::vector<std::string> notes() const;
  // The owned buffers the views point into (moved into ModelWeights::keep_alive).
  std::vector<std::shared_ptr<const void>> take_owned() { return std::move(owned_); }

 private:
  std::vector<QMatrix> views(const std::string& module, const std::string& weight_name, int64_t n,
                             int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows);
  std::vector<QMatrix> affine_views(const std::string& module, const TensorView& w, const std::string& weight_name,
                                    int64_t n, int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows);
  QMatrix fp8_view(const std::string& module, const TensorView& w, const std::string& weight_name, int64_t rows,
                   int64_t cols);
  QMatrix int4_view(const std::string& module, int64_t rows, int64_t cols);
  // t's data, or an aligned owned copy of it when its address is not a multiple of its element size.
  const uint8_t* aligned(const TensorView& t);
  uint8_t* alloc(size_t bytes);
  void use(const std::string& name) { used_.insert(name); }

  const CheckpointFiles& files_;
  const QuantConfig& quant_;
  std::unordered_set<std::string> used_;
  std::vector<std::shared_ptr<const void>> owned_;
  std::map<const void*, const uint8_t*> copies_;  // tensor data -> its aligned copy
  size_t copied_tensors_ = 0, copied_bytes_ = 0;
  std::map<std::string, std::pair<size_t, size_t>> repacked_;  // "what -> into" -> (matrices, bytes)
  size_t fp8_matrices_ = 0;
};

}  // namespace lily
