// A minimal safetensors writer (the project's loader branch owns reading; this writes what `lily synth`
// needs): 8-byte little-endian header length, JSON header with dtype/shape/data_offsets, 8-byte aligned data.
// Tensor bytes come from a callback so large tensors can be streamed (e.g. dequantised row by row).
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
  void write(const void* p, size_t n);
};

struct TensorOut {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::function<void(TensorSink&)> produce;  // must write exactly nbytes()
  size_t nbytes() const;
};

// Writes `tensors` in order; checks that each producer wrote exactly its size.
void write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors);

// A producer that copies `n` bytes from `p`.
std::function<void(TensorSink&)> bytes_producer(const void* p, size_t n);

}  // namespace lily
