#include "cli/model_args.h"

#include "core/error.h"
#include "core/progress.h"
#include "synth/synthetic_fp8.h"
#include "synth/synthetic_model.h"
#include "synth/synthetic_mtp.h"

namespace lily {

std::vector<std::string> model_flags() { return {"model", "synthetic", "seed", "synthetic-format"}; }

std::shared_ptr<ModelWeights> open_model(const Args& a) {
  if (a.has("model") && a.has("synthetic")) throw Error("give either --model DIR or --synthetic PRESET, not both");
  if (a.has("model")) return load_model(a.get("model"));
  if (!a.has("synthetic")) throw Error("no model: pass --model DIR or --synthetic PRESET (e.g. qwen3.6-35b-a3b)");
  long seed = a.get_int("seed", 1);
  const std::string fmt = a.get("synthetic-format", "mlx4");
  if (fmt != "mlx4" && fmt != "fp8")
    throw Error("--synthetic-format: expected mlx4 (MLX affine 4-bit, the default) or fp8 (the FP8 release's layout), "
                "got '" + fmt + "'");
  Progress bar("synthetic " + a.get("synthetic") + (fmt == "fp8" ? " fp8" : ""), 1);
  auto report = [&](uint64_t done, uint64_t total) { bar.update(done, total); };
  auto w = fmt == "fp8" ? make_synthetic_fp8(a.get("synthetic"), uint64_t(seed), report)
                        : make_synthetic(a.get("synthetic"), uint64_t(seed), report);
  bar.finish();
  // with --mtp (not off): a random MTP block of the same shapes (synth/synthetic_mtp.h), for timing
  if (a.has("mtp") && a.get("mtp") != "off" && !a.has("mtp-from")) add_synthetic_mtp(*w, uint64_t(seed));
  return w;
}

std::string model_label(const Args& a) {
  if (a.has("model")) return a.get("model");
  const std::string fmt = a.get("synthetic-format", "mlx4");
  return "synthetic:" + a.get("synthetic") + (fmt == "mlx4" ? "" : ":" + fmt) + ":seed=" +
         std::to_string(a.get_int("seed", 1));
}

}  // namespace lily
