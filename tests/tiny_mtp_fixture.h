// The tiny fixture's model (bf16, or another layout) with its MTP block loaded, and its reference prompt ids: the model the speculative
// decoding tests (CPU and CUDA) run on. Loaded once per test binary.
#pragma once
#include <cstdint>
#include <map>
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

// layout: the main model's directory under fixtures/tiny ("model-bf16", or "model-mlx-4bit", whose MTP block comes
// from model-bf16 as with --mtp-from: the mlx conversions drop it). Loaded once per layout.
inline TinyMtp& tiny_mtp(const std::string& layout = "model-bf16") {
  static std::map<std::string, TinyMtp> loaded;
  auto it = loaded.find(layout);
  if (it != loaded.end()) return it->second;
  const std::string dir = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
  TinyMtp t;
  t.w = load_model(dir + layout);
  if (layout == "model-bf16") load_mtp(*t.w);
  else load_mtp(*t.w, dir + "model-bf16");
  auto ref = SafetensorsFile::open(dir + "reference-bf16.safetensors");
  const TensorView* ids = ref->find("prompt_ids");
  const int32_t* p = static_cast<const int32_t*>(ids->data);
  t.prompt.assign(p, p + ids->nbytes / 4);
  return loaded.emplace(layout, std::move(t)).first->second;
}

}  // namespace lily::test
