// MLX affine quantisation settings from config.json `quantization`: a base {bits, group_size, mode} plus
// per-module overrides keyed by module path (without ".weight").
#pragma once
#include <map>
#include <string>

namespace lily {

struct QuantSpec {
  bool quantized = false;
  int bits = 0;
  int group = 0;
  std::string source;  // where it came from, for messages: "config.json quantization['...']"
};

class QuantConfig {
 public:
  // Reads `quantization` (or an MLX-style `quantization_config`) from config.json text. Absent: present() is
  // false. A mode other than "affine" (or an HF quant_method) throws "unsupported quantisation mode".
  static QuantConfig parse(const std::string& config_json_text, const std::string& path);

  bool present() const { return present_; }
  QuantSpec resolve(const std::string& module) const;  // override for `module`, else the base

 private:
  bool present_ = false;
  std::string path_;
  QuantSpec base_;
  std::map<std::string, QuantSpec> overrides_;
};

}  // namespace lily
