// A random multi-token-prediction block for a synthetic model (`--synthetic PRESET --mtp K`), so that speculative
// decoding can be timed without a checkpoint: its decoder layer is layer 0 of a one-layer synthetic model of the
// same config made full-attention (MLX affine 4-bit as the main layers, its own seed), its norms 1 +- 0.05, fc
// [H, 2H] dense BF16 with std 1/sqrt(2H). Every value is a function of the seed only.
#pragma once
#include <cstdint>

#include "model/weights.h"

namespace lily {

// Sets w.mtp (and w.mtp_tensors to a note naming it synthetic).
void add_synthetic_mtp(ModelWeights& w, uint64_t seed);

}  // namespace lily
