// Entry points of the CUDA backend for make_backend (src/app): only declared/defined when LILY_HAVE_CUDA.
#pragma once
#include <memory>
#include <string>

#include "engine/backend.h"

namespace lily {

// True when the CUDA runtime sees at least one device (false, never throwing, otherwise).
bool cuda_device_available();
// Uploads the weights (4/8-bit stay packed, bf16 stays bf16) and builds the decode step. Throws lily::Error.
std::unique_ptr<Backend> make_cuda_backend(std::shared_ptr<ModelWeights> w);

// Measured device limits for the bench (src/cuda/common/limits_probe.cu): D2D copy GB/s (read + written) and the
// bf16 tensor-core rate through cuBLAS (8192^3, random data).
struct CudaLimits {
  std::string device;
  double copy_gbps = 0, matmul_tflops = 0;
};
CudaLimits cuda_probe_limits(double seconds);
// The copy rate alone (GB/s read + written, best of 2 GiB copies for about `seconds`).
double cuda_copy_gbps(double seconds);

}  // namespace lily
