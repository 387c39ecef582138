#include "app/make_backend.h"

#include "core/env.h"
#include "core/error.h"
#include "cpu/cpu_backend.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_factory.h"
#endif

namespace lily {

std::vector<std::string> backend_kinds() { return {"auto", "cpu", "cpu-ref", "cuda"}; }

std::unique_ptr<Backend> make_backend(const std::string& kind, std::shared_ptr<ModelWeights> w) {
  reject_retired_env();  // whatever the backend: a retired variable is never silently ignored
  if (kind == "cpu") return std::make_unique<CpuBackend>(std::move(w), cpu_fast_kernels());
  if (kind == "cpu-ref") return std::make_unique<CpuBackend>(std::move(w), cpu_reference_kernels());
#ifdef LILY_HAVE_CUDA
  if (kind == "cuda") {
    if (!cuda_device_available()) throw Error("--backend cuda: no CUDA device is available");
    return make_cuda_backend(std::move(w));
  }
  if (kind == "auto")
    return cuda_device_available() ? make_cuda_backend(std::move(w))
                                   : std::make_unique<CpuBackend>(std::move(w), cpu_fast_kernels());
#else
  if (kind == "cuda") throw Error("--backend cuda: this build of lily has no CUDA backend (nvcc was not found)");
  if (kind == "auto") return std::make_unique<CpuBackend>(std::move(w), cpu_fast_kernels());
#endif
  std::string known;
  for (const auto& k : backend_kinds()) known += (known.empty() ? "" : ", ") + k;
  throw Error("unknown backend '" + kind + "' (expected one of " + known + ")");
}

}  // namespace lily
