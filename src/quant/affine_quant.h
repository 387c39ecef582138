// MLX affine quantisation of f32 rows, and the recipe choosing bits and group size per module (the
// mlx-community default: 4-bit group 64, router and shared_expert_gate 8-bit; per-module overrides for mixed
// recipes). Used by `lily quantize`, the checkpoint writer and the tests' quantised fixtures.
#pragma once
#include <cstdint>
#include <map>
#include <string>

namespace lily {

struct QuantChoice {
  int bits = 4;    // 2, 3, 4, 5, 6 or 8
  int group = 64;  // 32, 64 or 128
  bool operator==(const QuantChoice&) const = default;
};

struct MlxRecipe {
  QuantChoice base{4, 64};
  QuantChoice gates{8, 64};                      // mlp.gate (router) and mlp.shared_expert_gate
  std::map<std::string, QuantChoice> modules;    // by MLX module name ("language_model.lm_head", ...), wins
  // The choice for the module `name` (MLX path without ".weight").
  QuantChoice choose(const std::string& name) const;
};

// Quantises one row of `cols` weights (cols % group == 0) per group of `group`: bias = min, scale =
// (max - min) / (2^bits - 1), both rounded to bf16, codes = clamp(round((w - bias) / scale)) computed with the
// rounded values. Writes the codes as MLX packs them (a little-endian bit stream, cols*bits/8 bytes) and
// cols/group bf16 scales and biases. A constant group gets scale 1 (its codes are 0, its bias the value).
void quantize_row_affine(const float* w, int64_t cols, int bits, int group, uint8_t* codes, uint16_t* scales,
                         uint16_t* biases);

// Checks bits (2..8, not 7) and group (32, 64, 128); throws lily::Error naming `what` otherwise.
void check_quant_choice(const QuantChoice& q, const std::string& what);

}  // namespace lily
