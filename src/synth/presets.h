// Named model shapes for synthetic weights: the real Qwen3.6-35B-A3B and scaled-down ones for tests.
#pragma once
#include <array>
#include <string>
#include <vector>

#include "model/config.h"

namespace lily {

// "qwen3.6-35b-a3b" (the real shapes), "medium" (every matrix of the real shapes, but 4 layers, 32 experts top-8
// and a vocabulary of 24832, a tenth: per token it reads the real model's mix of matrices, lm_head included, at a
// tenth of the bytes), "small" (real head sizes, hidden 512, 4 layers, 32 experts top-8) and "tiny" (the shapes of
// tests/fixtures/tiny). Throws lily::Error listing the known names otherwise.
ModelConfig make_synthetic_config(const std::string& preset);
std::vector<std::string> synthetic_presets();

// Number of BPE tokens (byte-level) the preset's tokenizer has before the added special tokens.
int synthetic_bpe_vocab(const std::string& preset);

// Interleaved MRoPE sections (t, h, w) splitting the rotary half rope_dim / 2 as Qwen3.5 does ([11, 11, 10] for
// rope_dim 64); text positions are equal in all three, so they only matter to other engines' loaders.
std::array<int, 3> default_mrope_sections(int rope_dim);

}  // namespace lily
