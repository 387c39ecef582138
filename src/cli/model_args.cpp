#include "cli/model_args.h"

#include "core/error.h"
#include "core/progress.h"
#include "synth/synthetic_formats.h"
#include "synth/synthetic_mtp.h"

namespace lily {

std::vector<std::string> model_flags() { return {"model", "synthetic", "seed", "synthetic-format"}; }

std::shared_ptr<ModelWeights> open_model(const Args& a) {
  if (a.has("model") && a.has("synthetic")) throw Error("give either --model DIR or --synthetic PRESET, not both");
  if (a.has("model") && a.has("synthetic-format")) throw Error("--synthetic-format goes with --synthetic, not --model");
  if (a.has("model")) return load_model(a.get("model"));
  if (!a.has("synthetic")) throw Error("no model: pass --model DIR or --synthetic PRESET (e.g. qwen3.6-35b-a3b)");
  long seed = a.get_int("seed", 1);
  Progress bar("synthetic " + a.get("synthetic"), 1);
  auto w = make_synthetic_in_format(a.get("synthetic"), uint64_t(seed), a.get("synthetic-format", "mlx-4bit"),
                                    [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  bar.finish();
  // with --mtp (not off): a random MTP block of the same shapes (synth/synthetic_mtp.h), for timing
  if (a.has("mtp") && a.get("mtp") != "off" && !a.has("mtp-from")) add_synthetic_mtp(*w, uint64_t(seed));
  return w;
}

std::string model_label(const Args& a) {
  if (a.has("model")) return a.get("model");
  std::string s = "synthetic:" + a.get("synthetic") + ":seed=" + std::to_string(a.get_int("seed", 1));
  if (a.has("synthetic-format")) {  // appended in two steps: GCC 12 -Wrestrict misfires on ":" + std::string
    s += ':';
    s += a.get("synthetic-format");
  }
  return s;
}

}  // namespace lily
