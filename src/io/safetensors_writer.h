// The one safetensors writer (used by tests, `lily synth`, `lily quantize` and `lily logits --out`). Tensor bytes
// come from producers, so large tensors can be streamed (dequantised or requantised a row at a time).
// Two styles:
//  - Padded (what the Python `safetensors` library writes): header keys in the given order, __metadata__
//    {"format": "pt"} first, the header padded with spaces to a multiple of 8 bytes; data in the given order.
//  - Mlx (what MLX's save_safetensors writes): one compact JSON header with the keys sorted, __metadata__
//    {"format": "mlx"}, no padding (so the data section usually starts at an unaligned offset); the data in the
//    given order, which need not be the header's (MLX writes its arrays in hash-map order).
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lily {

struct TensorSink {  // where a producer writes its bytes; throws lily::Error on I/O failure
  std::FILE* f;
  std::string path;
  uint64_t written = 0;
  void write(const void* p, size_t n);
};

// A tensor to write: `produce` must write exactly nbytes() = prod(shape) * dtype_size(dtype) bytes (checked).
struct TensorOut {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::function<void(TensorSink&)> produce;
  uint64_t nbytes() const;  // throws on a negative or overflowing shape
};

enum class SafetensorsStyle { Padded, Mlx };

// Writes `tensors` in order. Throws lily::Error naming the file and tensor on a duplicate or reserved name, a bad
// shape, a producer writing the wrong number of bytes, or an I/O failure.
void write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors,
                            SafetensorsStyle style = SafetensorsStyle::Padded);

// A producer that copies `n` bytes from `p` (which must outlive the write).
std::function<void(TensorSink&)> bytes_producer(const void* p, size_t n);

// A tensor held in memory, for callers that have all the bytes (tests, `lily logits --out`).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t nbytes = 0;
};
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       SafetensorsStyle style = SafetensorsStyle::Padded);

}  // namespace lily
