// The layouts of the tiny fixture (tests/fixtures/tiny/model-<layout>, made by tools/fixtures/make_fixtures.py with
// transformers) and the reference file each is checked against.
#pragma once
#include <string>

namespace lily::test {

// reference-<this>.safetensors holds the transformers outputs of `layout`'s dequantised weights:
//  - model-mlx-4bit-compact is model-mlx-4bit's tensors re-encoded as MLX writes them (the same weights);
//  - model-awq is the AutoAWQ packing of the very codes, zeros and scales that model-gptq packs the AutoGPTQ way (the
//    generator quantises once for both), so its dequantised weights and reference are model-gptq's (the generator's
//    reference-awq.safetensors is byte-identical and not kept).
inline std::string tiny_reference_layout(const std::string& layout) {
  if (layout.ends_with("-compact")) return layout.substr(0, layout.size() - 8);
  if (layout == "awq") return "gptq";
  return layout;
}

}  // namespace lily::test
