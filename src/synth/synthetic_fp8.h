// Random weights in the layout of the official FP8 release (Qwen/Qwen3.6-35B-A3B-FP8), built in memory: e4m3 codes
// with an f32 scale per 128x128 block for the projections and experts; bf16 for the modules that release keeps in
// BF16 (embeddings, lm_head, router, shared_expert_gate, in_proj_a / in_proj_b). For `lily bench` on the FP8 form
// without the download (`--synthetic PRESET --synthetic-format fp8`).
//
// Values: codes with a random sign, exponent field 4..11 and mantissa (every code as likely as its mapping gives,
// no NaN), block scale gain / sqrt(cols) / rms(code values) times a factor in [0.75, 1.25], so weights have std
// ~gain / sqrt(cols) as in the MLX synthetic model (synthetic_model.h, whose gains, norms and vectors it shares);
// bf16 matrices uniform with the same std. Every value is a function of (seed, tensor name, index) only.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model/weights.h"
#include "synth/synthetic_model.h"

namespace lily {

std::shared_ptr<ModelWeights> make_synthetic_fp8(const std::string& preset, uint64_t seed,
                                                 const SynthProgressFn& progress = {});

// The e4m3 code of random byte b (the mapping above).
inline uint8_t synth_fp8_code(uint8_t b) { return uint8_t((b & 0x87u) | ((((b >> 3) & 7u) + 4u) << 3)); }

}  // namespace lily
