// Backends by name for tests that run on every backend: "cuda" needs a build with the CUDA backend and a device
// (the tests skip without one).
#pragma once
#include <memory>
#include <string>

#include "app/make_backend.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_factory.h"
#endif

inline bool test_backend_usable(const std::string& kind) {
  if (kind.rfind("cuda", 0) != 0) return true;
#ifdef LILY_HAVE_CUDA
  return lily::cuda_device_available();
#else
  return false;
#endif
}

inline std::unique_ptr<lily::Backend> make_test_backend(const std::string& kind, std::shared_ptr<lily::ModelWeights> w) {
  return lily::make_backend(kind, std::move(w));
}
