// The synthetic model (synth/synthetic_model.h) in another stored format, built in memory and loaded through that
// format's own loader, so that `--synthetic PRESET --synthetic-format NAME` measures the same weights the loader
// would make from a file, with no file written:
//   mlx-4bit   (default) make_synthetic as is (MLX affine 4-bit, group 64, bf16 scales; router 8-bit)
//   fp8        the FP8 release's layout (synth/synthetic_fp8.h), built directly in that form
//   gguf-q4km  the same weights as the Q4_K_M-like GGUF `lily synth --gguf` writes (synth/gguf_checkpoint.h),
//              made in memory and read by load_model_gguf (Q4_K / Q8_0 repacked, Q6_K kept in its blocks)
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "synth/synthetic_model.h"

namespace lily {

std::vector<std::string> synthetic_formats();

// Throws lily::Error naming the known formats for an unknown one. progress: as make_synthetic's (its own
// generation, then the format's conversion, each 0..total).
std::shared_ptr<ModelWeights> make_synthetic_in_format(const std::string& preset, uint64_t seed,
                                                       const std::string& format,
                                                       const SynthProgressFn& progress = {});

}  // namespace lily
