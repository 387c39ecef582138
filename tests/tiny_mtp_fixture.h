// The tiny fixture's bf16 model with its MTP block loaded, and its reference prompt ids: the model the speculative
// decoding tests (CPU and CUDA) run on. Loaded once per test binary.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/weights.h"

namespace lily::test {

struct TinyMtp {
  std::shared_ptr<ModelWeights> w;
  std::vector<int32_t> prompt;  // reference-bf16's prompt_ids
};

inline TinyMtp& tiny_mtp() {
  static TinyMtp f = [] {
    const std::string dir = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
    TinyMtp t;
    t.w = load_model(dir + "model-bf16");
    load_mtp(*t.w);
    auto ref = SafetensorsFile::open(dir + "reference-bf16.safetensors");
    const TensorView* ids = ref->find("prompt_ids");
    const int32_t* p = static_cast<const int32_t*>(ids->data);
    t.prompt.assign(p, p + ids->nbytes / 4);
    return t;
  }();
  return f;
}

}  // namespace lily::test
