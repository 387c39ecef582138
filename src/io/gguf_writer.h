// GGUF writer (version 3): metadata and tensors collected in memory, written in one pass. Used by the tests
// (fixtures converted to GGUF) and by `lily synth --gguf`.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace lily {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = 32) : alignment_(alignment) {}

  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_u64(const std::string& key, uint64_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_string(const std::string& key, const std::string& v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_bools(const std::string& key, const std::vector<bool>& v);

  // A tensor of ggml `type` with row-major `shape` (outermost first; stored reversed as ggml's ne);
  // `bytes` must hold exactly the type's size for that shape (checked).
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                  std::vector<uint8_t> bytes);

  // A tensor whose bytes a producer writes at file-writing time through `emit` (in any number of pieces, exactly
  // the type's size for `shape` in all, checked): large models are written without holding them in memory.
  using Emit = std::function<void(const void* p, size_t n)>;
  void add_tensor_stream(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                         std::function<void(const Emit& emit)> producer);

  // Writes the file (throws lily::Error naming the path on failure).
  void write(const std::string& path) const;
  // The file's bytes (streamed tensors are produced into memory; reserved at the file's size up front).
  std::vector<uint8_t> bytes() const;
  // The size of the file write() makes.
  uint64_t file_size() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
    size_t nbytes = 0;
    std::function<void(const Emit&)> producer;  // set for streamed tensors
  };
  static size_t tensor_bytes(const std::string& name, GgmlType type, const std::vector<int64_t>& shape);
  std::vector<uint8_t> header() const;
  void key(const std::string& k, GgufType t);
  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace lily
