// CUDA error checking: every runtime call goes through LILY_CUDA_CHECK, every launch is followed by
// LILY_CUDA_CHECK_LAUNCH(); failures throw lily::Error naming the call, file and line.
#pragma once
#include <cuda_runtime_api.h>

#include <string>

#include "core/error.h"

namespace lily::cuda {

[[noreturn]] inline void cuda_fail(cudaError_t e, const char* what, const char* file, int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ") in " + what +
              " at " + file + ":" + std::to_string(line));
}

}  // namespace lily::cuda

#define LILY_CUDA_CHECK(call)                                                   \
  do {                                                                          \
    cudaError_t lily_e_ = (call);                                               \
    if (lily_e_ != cudaSuccess) ::lily::cuda::cuda_fail(lily_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define LILY_CUDA_CHECK_LAUNCH() LILY_CUDA_CHECK(cudaGetLastError())
