// GGUF writer (version 3): metadata and tensors collected in memory, written in one pass. Used by the tests
// (fixtures converted to GGUF) and by `lily synth --gguf`.
#pragma once
#include <cstdint>
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

  // Writes the file (throws lily::Error naming the path on failure).
  void write(const std::string& path) const;
  // The file's bytes (tests).
  std::vector<uint8_t> bytes() const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  void key(const std::string& k, GgufType t);
  uint32_t alignment_;
  uint64_t n_kv_ = 0;
  std::vector<uint8_t> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace lily
