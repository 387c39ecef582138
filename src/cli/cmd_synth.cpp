// `lily synth --out DIR [--layout mlx-4bit|hf-bf16] [--preset NAME] [--seed N] [--shard-gb G]`: writes a
// random-weight checkpoint with the real shapes (see synth/checkpoint_writer.h).
// `lily synth --gguf FILE [--preset NAME] [--seed N]`: the same weights as a Q4_K_M-like llama.cpp GGUF file
// (see synth/gguf_checkpoint.h).
#include <chrono>
#include <cstdio>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "synth/checkpoint_writer.h"
#include "synth/gguf_checkpoint.h"
#include "synth/presets.h"
#include "synth/synthetic_model.h"

namespace lily {
namespace {

int run_synth(const Args& a) {
  a.check_known({"out", "layout", "preset", "seed", "shard-gb", "gguf"});
  if (!a.has("out") && !a.has("gguf")) throw Error("--out DIR or --gguf FILE is required");
  const std::string preset = a.get("preset", "qwen3.6-35b-a3b");
  CheckpointOptions opt;
  opt.layout = a.get("layout", "mlx-4bit");
  opt.bpe_vocab = synthetic_bpe_vocab(preset);
  double gb = a.get_double("shard-gb", 4.0);
  if (gb <= 0) throw Error("--shard-gb must be positive");
  opt.max_shard_bytes = uint64_t(gb * 1e9);
  const auto seed = uint64_t(a.get_int("seed", 1));
  auto t0 = std::chrono::steady_clock::now();
  std::shared_ptr<ModelWeights> w;
  {
    Progress bar("generating", 1);
    w = make_synthetic(preset, seed, [&](uint64_t d, uint64_t t) { bar.update(d, t); });
    bar.finish();
  }
  auto t1 = std::chrono::steady_clock::now();
  if (a.has("gguf")) {
    const std::string tok = synthetic_gguf_tokenizer(preset, w->cfg.vocab);
    Progress bar("writing", 1);
    write_gguf_checkpoint(*w, a.get("gguf"), tok, [&](uint64_t d, uint64_t t) { bar.update(d, t); });
    bar.finish();
    std::printf("wrote %s (Q4_K_M-like GGUF, preset %s, seed %llu): generated in %.1f s, written in %.1f s\n",
                a.get("gguf").c_str(), preset.c_str(), (unsigned long long)seed,
                std::chrono::duration<double>(t1 - t0).count(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    return 0;
  }
  {
    Progress bar("writing", 1);
    write_checkpoint(*w, a.get("out"), opt, [&](uint64_t d, uint64_t t) { bar.update(d, t); });
    bar.finish();
  }
  auto t2 = std::chrono::steady_clock::now();
  std::printf("wrote %s (%s, preset %s, seed %llu): generated in %.1f s, written in %.1f s\n", a.get("out").c_str(),
              opt.layout.c_str(), preset.c_str(), (unsigned long long)seed,
              std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
  return 0;
}

LILY_COMMAND("synth", "write a random-weight checkpoint with the real shapes (--out DIR [--layout] [--preset], or --gguf FILE)",
             run_synth, {});

}  // namespace
}  // namespace lily
