// The composition root: chooses and builds a compute backend by name. It sits above engine/ (the Backend
// interface), cpu/ and cuda/ (the implementations), so that none of those includes another's construction code;
// the commands in cli/ and the tests call it.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace lily {

// kind: "cpu" (fast kernels), "cpu-ref" (reference kernels), "cuda", or "auto" (cuda when built and a device
// is present, else cpu). Throws lily::Error for an unknown kind or an unavailable device.
std::unique_ptr<Backend> make_backend(const std::string& kind, std::shared_ptr<ModelWeights> w);
// Every kind make_backend accepts (in every build; "cuda" throws where the build or the machine has none).
std::vector<std::string> backend_kinds();

}  // namespace lily
