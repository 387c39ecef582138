// `lily quantize --model SRC --out DST [--bits 4] [--group-size 64] [--gate-bits 8] [--shard-gb 5]
// [--kl-tokens 16]`: writes an MLX affine checkpoint (mlx-community recipe by default: 4-bit group 64, router and
// shared_expert_gate 8-bit) from a BF16, FP8 or other checkpoint the loader reads, then reports the KL of the
// result against the source on a fixed token sequence.
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "cli/registry.h"
#include "core/error.h"
#include "core/progress.h"
#include "quant/quantize_checkpoint.h"

namespace lily {
namespace {

int run_quantize(const Args& a) {
  a.check_known({"model", "out", "bits", "group-size", "gate-bits", "shard-gb", "kl-tokens", "kl-backend"});
  if (!a.has("model")) throw Error("--model SRC is required (a checkpoint directory)");
  if (!a.has("out")) throw Error("--out DST is required (a new directory)");
  QuantizeOptions opt;
  opt.recipe.base.bits = int(a.get_int("bits", 4));
  opt.recipe.base.group = int(a.get_int("group-size", 64));
  opt.recipe.gates.bits = int(a.get_int("gate-bits", 8));
  opt.recipe.gates.group = opt.recipe.base.group;
  const double gb = a.get_double("shard-gb", 5.0);
  if (!(gb > 0)) throw Error("--shard-gb must be positive");
  opt.max_shard_bytes = uint64_t(gb * 1e9);
  const long kl_tokens = a.get_int("kl-tokens", 16);
  if (kl_tokens < 0 || kl_tokens > 4096) throw Error("--kl-tokens must be in [0, 4096]");
  // Map the source lazily: each tensor is read once while it is quantised, and its pages can be dropped after.
  ::setenv("LILY_MMAP_POPULATE", "0", 1);
  const auto t0 = std::chrono::steady_clock::now();
  auto src = load_model(a.get("model"));
  {
    Progress bar("quantizing", 1);
    opt.progress = [&](uint64_t d, uint64_t t) { bar.update(d, t); };
    quantize_checkpoint(*src, a.get("model"), a.get("out"), opt);
    bar.finish();
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: MLX affine %d-bit group %d (router and shared_expert_gate %d-bit) in %.1f s\n",
              a.get("out").c_str(), opt.recipe.base.bits, opt.recipe.base.group, opt.recipe.gates.bits, secs);
  if (kl_tokens > 0) {
    auto q = load_model(a.get("out"));
    const KlReport r = kl_against(src, q, a.get("kl-backend", "cpu"), int(kl_tokens));
    std::printf("KL(source || quantised) over %d positions: mean %.4g, max %.4g; top-1 agreement %.1f%%; "
                "max |dlogit| %.4g\n",
                r.positions, r.mean_kl, r.max_kl, 100.0 * r.top1, r.max_abs);
  }
  return 0;
}

LILY_COMMAND("quantize",
             "write an MLX affine checkpoint from a BF16/FP8 one (--model SRC --out DST [--bits 4] [--group-size 64])",
             run_quantize, {});

}  // namespace
}  // namespace lily
