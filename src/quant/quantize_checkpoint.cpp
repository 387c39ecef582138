#include "quant/quantize_checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "app/make_backend.h"
#include "engine/backend.h"
#include "eval/logit_metrics.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "synth/checkpoint_writer.h"

namespace lily {

namespace fs = std::filesystem;

void quantize_checkpoint(const ModelWeights& src, const std::string& src_dir, const std::string& out_dir,
                         const QuantizeOptions& opt) {
  check_quant_choice(opt.recipe.base, "--bits/--group-size");
  check_quant_choice(opt.recipe.gates, "router bits");
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !fs::is_empty(out_dir, ec))
    throw Error(out_dir + ": exists and is not empty; expected a new or empty directory");
  if (fs::weakly_canonical(src_dir, ec) == fs::weakly_canonical(out_dir, ec))
    throw Error(out_dir + ": is the source directory");
  const std::string cfg_path = (fs::path(src_dir) / "config.json").string();
  nlohmann::ordered_json cfg;
  try {
    cfg = nlohmann::ordered_json::parse(read_text_file(cfg_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(cfg_path + ": not valid JSON: " + e.what());
  }
  CheckpointOptions co;
  co.layout = "mlx-4bit";
  co.recipe = opt.recipe;
  co.style = SafetensorsStyle::Mlx;
  co.max_shard_bytes = opt.max_shard_bytes;
  co.base_config = &cfg;
  co.copy_files_from = src_dir;
  if (src.checkpoint)
    for (const std::string& n : src.mtp_tensors) {
      const TensorView& t = src.checkpoint->get(n);
      co.extra.push_back({n, t.dtype, t.shape, bytes_producer(t.data, t.nbytes)});
    }
  write_checkpoint(src, out_dir, co, opt.progress);
}

KlReport kl_against(const std::shared_ptr<ModelWeights>& ref, const std::shared_ptr<ModelWeights>& ours,
                    const std::string& backend, int n) {
  KlReport r;
  if (n <= 0) return r;
  const int V = ref->cfg.vocab;
  if (ours->cfg.vocab != V) throw Error("kl: the models' vocabularies differ");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& id : ids) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    id = int32_t(x % uint64_t(V));
  }
  auto run = [&](const std::shared_ptr<ModelWeights>& w) {
    auto be = make_backend(backend, w);
    auto st = be->new_state(n + 1);
    std::vector<float> out(static_cast<size_t>(n) * static_cast<size_t>(V));
    be->forward(*st, ids.data(), n, n, out.data(), {});
    return out;
  };
  const auto a = run(ref), b = run(ours);
  const LogitComparison c = compare_logits(a.data(), b.data(), n, V, {});
  r.positions = c.positions;
  r.mean_kl = c.mean_kl;
  r.max_kl = c.max_kl;
  r.top1 = c.top1_agreement;
  r.max_abs = c.max_abs_err;
  return r;
}

}  // namespace lily
