// Entry points of the CUDA backend for make_backend (src/engine): only declared/defined when LILY_HAVE_CUDA.
#pragma once
#include <memory>

#include "engine/backend.h"

namespace lily {

// True when the CUDA runtime sees at least one device (false, never throwing, otherwise).
bool cuda_device_available();
// Uploads the weights (4/8-bit stay packed, bf16 stays bf16) and builds the decode step. Throws lily::Error.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<ModelWeights> w);

}  // namespace lily
