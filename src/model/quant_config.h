// Quantisation settings from config.json:
//  - MLX `quantization` (or `quantization_config` without quant_method): a base {bits, group_size, mode} plus
//    per-module overrides keyed by module path (without ".weight"); mode "affine" only, bits 2..8 (not 7).
//  - Hugging Face `quantization_config.quant_method`: "fp8" (fmt e4m3, weight_block_size), "gptq" / "awq" (int4
//    with groups) and "compressed-tensors" (format pack-quantized, int4 groups). Anything else is an error naming
//    the method (or MLX mode).
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

enum class QuantMethod { None, MlxAffine, Fp8, Gptq, Awq, CompressedTensors };

// A Hugging Face quantization_config, as far as the loader uses it.
struct HfQuant {
  int bits = 4;
  int group = 128;          // input channels per group; -1: one group per row (per channel)
  int fp8_block = 128;      // Fp8: weight_block_size (square)
  bool desc_act = false;    // Gptq: act-order
  bool gptq_v2 = false;     // Gptq: checkpoint_format gptq_v2 (zeros stored as is)
  bool sym = true;
};

class QuantConfig {
 public:
  // Reads the quantisation entry of config.json text. Absent: method() is None. Unsupported modes, methods,
  // formats or widths throw "unsupported quantisation ..." naming the field and value.
  static QuantConfig parse(const std::string& config_json_text, const std::string& path);

  QuantMethod method() const { return method_; }
  bool present() const { return method_ == QuantMethod::MlxAffine; }  // MLX affine settings present
  QuantSpec resolve(const std::string& module) const;  // MLX: override for `module`, else the base
  const HfQuant& hf() const { return hf_; }
  const std::string& source() const { return source_; }  // "config.json quantization_config" (for messages)

 private:
  QuantMethod method_ = QuantMethod::None;
  std::string path_, source_;
  QuantSpec base_;
  std::map<std::string, QuantSpec> overrides_;
  HfQuant hf_;
};

const char* quant_method_name(QuantMethod m);

}  // namespace lily
