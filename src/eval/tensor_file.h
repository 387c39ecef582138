// Reads named tensors from one safetensors file (reference logits files: prompt_ids i32 [L],
// prompt_logits f32 [L, V], ...). Small and self-contained; whole tensors are read into memory.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace lily {

class TensorFile {
 public:
  struct Info {
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // byte range in the data section
  };

  explicit TensorFile(const std::string& path);  // parses the header; throws lily::Error naming the file
  bool has(const std::string& name) const { return infos_.count(name) != 0; }
  const Info& info(const std::string& name) const;
  std::vector<std::string> names() const;
  std::vector<uint8_t> raw(const std::string& name) const;
  // Typed reads; throw lily::Error if the stored dtype differs.
  std::vector<float> f32(const std::string& name) const;
  std::vector<int32_t> i32(const std::string& name) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, Info> infos_;
};

}  // namespace lily
