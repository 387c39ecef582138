#include "cli/model_args.h"

#include "core/error.h"
#include "core/progress.h"
#include "synth/synthetic_model.h"
#include "synth/synthetic_mtp.h"

namespace lily {

std::vector<std::string> model_flags() { return {"model", "synthetic", "seed"}; }

std::shared_ptr<ModelWeights> open_model(const Args& a) {
  if (a.has("model") && a.has("synthetic")) throw Error("give either --model DIR or --synthetic PRESET, not both");
  if (a.has("model")) return load_model(a.get("model"));
  if (!a.has("synthetic")) throw Error("no model: pass --model DIR or --synthetic PRESET (e.g. qwen3.6-35b-a3b)");
  long seed = a.get_int("seed", 1);
  Progress bar("synthetic " + a.get("synthetic"), 1);
  auto w = make_synthetic(a.get("synthetic"), uint64_t(seed), [&](uint64_t done, uint64_t total) {
    bar.update(done, total);
  });
  bar.finish();
  // with --mtp (not off): a random MTP block of the same shapes (synth/synthetic_mtp.h), for timing
  if (a.has("mtp") && a.get("mtp") != "off" && !a.has("mtp-from")) add_synthetic_mtp(*w, uint64_t(seed));
  return w;
}

std::string model_label(const Args& a) {
  if (a.has("model")) return a.get("model");
  return "synthetic:" + a.get("synthetic") + ":seed=" + std::to_string(a.get_int("seed", 1));
}

}  // namespace lily
