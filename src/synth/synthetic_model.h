// Random weights with the exact in-memory layout of an MLX affine checkpoint (4-bit, group 64, BF16
// scales/biases; router and shared-expert gate 8-bit), built in memory without any file.
//
// Values: each group has q uniform in 0..2^bits-1, scale s = gain/sqrt(cols)/std(q) (times a random factor
// in [0.75, 1.25], sign random) and bias -s*(2^bits-1)/2, so weights have mean ~0 and std ~gain/sqrt(cols).
// Norms are 1 +- 0.05 (+1 folded), conv taps uniform in +-1/sqrt(K), dt_bias = softplus^-1 of a log-uniform
// step in [1e-3, 0.1], A_log = log U(1, 16) (a_neg = -exp(A_log)). The router has gain 4 so that the top-k
// set varies from token to token. Every value is a function of (seed, tensor name, index) only.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "model/weights.h"

namespace lily {

// progress(done_bytes, total_bytes) is called from worker threads (must be thread-safe), may be empty.
using SynthProgressFn = std::function<void(uint64_t done, uint64_t total)>;

// Builds the model of `preset` (see synth/presets.h). Buffers are owned via ModelWeights::keep_alive;
// layout = "mlx-affine". Generation runs on all hardware threads.
std::shared_ptr<ModelWeights> make_synthetic(const std::string& preset, uint64_t seed,
                                             const SynthProgressFn& progress = {});
// Same, from an explicit config (dimensions must be multiples of 64 where they are matrix inputs).
std::shared_ptr<ModelWeights> make_synthetic_from_config(const ModelConfig& cfg, uint64_t seed,
                                                         const SynthProgressFn& progress = {});

// The f32 vectors of w.cfg's model (norms, conv taps, dt_bias, a_neg) as make_synthetic makes them (w's layers
// already sized).
void fill_synthetic_vectors(ModelWeights& w, uint64_t seed);

// Bytes of all weights of a model (matrices incl. scales/biases as stored, plus f32 vectors).
uint64_t model_weight_bytes(const ModelWeights& w);

}  // namespace lily
