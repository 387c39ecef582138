#include "synth/checkpoint_writer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "synth/presets.h"
#include "synth/module_plan.h"
#include "synth/synth_tokenizer.h"

namespace lily {

namespace fs = std::filesystem;

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw Error("cannot create " + path);
  f << text;
  if (!f) throw Error("writing " + path + " failed");
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
  return buf;
}

}  // namespace

nlohmann::ordered_json mlx_quantization(const ModelConfig& c, const MlxRecipe& recipe) {
  nlohmann::ordered_json q = {{"group_size", recipe.base.group}, {"bits", recipe.base.bits}, {"mode", "affine"}};
  for (const auto& m : plan_modules(c)) {
    const QuantChoice qc = recipe.choose(m.name);
    if (!(qc == recipe.base)) q[m.name] = {{"group_size", qc.group}, {"bits", qc.bits}};
  }
  return q;
}

nlohmann::ordered_json checkpoint_config(const ModelConfig& c, bool quantized, int bpe_vocab) {
  using J = nlohmann::ordered_json;
  J layer_types = J::array();
  for (bool f : c.is_full) layer_types.push_back(f ? "full_attention" : "linear_attention");
  const auto [s0, s1, s2] = default_mrope_sections(c.rope_dim);
  const double prf = c.head_dim ? double(c.rope_dim) / double(c.head_dim) : 0.25;
  const int eot = bpe_vocab, im_end = bpe_vocab + 2;
  J t;
  t["model_type"] = "qwen3_5_moe_text";
  t["hidden_size"] = c.hidden;
  t["num_hidden_layers"] = c.n_layers;
  t["layer_types"] = layer_types;
  t["full_attention_interval"] = 4;
  t["vocab_size"] = c.vocab;
  char eps[32];
  std::snprintf(eps, sizeof eps, "%.7g", double(c.rms_eps));
  t["rms_norm_eps"] = std::stod(eps);
  t["hidden_act"] = "silu";
  t["num_attention_heads"] = c.n_q_heads;
  t["num_key_value_heads"] = c.n_kv_heads;
  t["head_dim"] = c.head_dim;
  t["attn_output_gate"] = true;
  t["attention_bias"] = false;
  t["partial_rotary_factor"] = prf;
  t["rope_parameters"] = {{"mrope_interleaved", true},
                          {"mrope_section", {s0, s1, s2}},
                          {"partial_rotary_factor", prf},
                          {"rope_theta", c.rope_theta},
                          {"rope_type", "default"}};
  t["linear_num_key_heads"] = c.lin_k_heads;
  t["linear_num_value_heads"] = c.lin_v_heads;
  t["linear_key_head_dim"] = c.lin_k_dim;
  t["linear_value_head_dim"] = c.lin_v_dim;
  t["linear_conv_kernel_dim"] = c.conv_kernel;
  t["num_experts"] = c.n_experts;
  t["num_experts_per_tok"] = c.top_k;
  t["moe_intermediate_size"] = c.expert_inter;
  t["shared_expert_intermediate_size"] = c.shared_inter;
  t["max_position_embeddings"] = c.max_pos;
  t["tie_word_embeddings"] = false;
  t["bos_token_id"] = eot;
  t["eos_token_id"] = eot;
  t["pad_token_id"] = eot;
  t["dtype"] = "bfloat16";
  J j;
  j["architectures"] = {"Qwen3_5MoeForConditionalGeneration"};
  j["model_type"] = "qwen3_5_moe";
  j["dtype"] = "bfloat16";
  j["tie_word_embeddings"] = false;
  j["image_token_id"] = bpe_vocab + 12;
  j["video_token_id"] = bpe_vocab + 13;
  j["vision_start_token_id"] = bpe_vocab + 9;
  j["vision_end_token_id"] = bpe_vocab + 10;
  j["eos_token_id"] = im_end;
  j["text_config"] = t;
  if (quantized) {
    const J q = mlx_quantization(c, MlxRecipe{});
    j["quantization"] = q;
    j["quantization_config"] = q;
  }
  j["lily_synthetic"] = true;
  return j;
}

std::vector<int> assign_shards(const std::vector<TensorOut>& ts, uint64_t max_bytes, int* n_shards) {
  std::vector<int> idx(ts.size());
  int shard = 0;
  uint64_t cur = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    uint64_t n = ts[i].nbytes();
    if (cur > 0 && cur + n > max_bytes) {
      ++shard;
      cur = 0;
    }
    idx[i] = shard;
    cur += n;
  }
  *n_shards = ts.empty() ? 0 : shard + 1;
  return idx;
}

void write_checkpoint(const ModelWeights& w, const std::string& dir, const CheckpointOptions& opt,
                      const std::function<void(uint64_t, uint64_t)>& progress) {
  bool mlx = opt.layout == "mlx-4bit";
  if (!mlx && opt.layout != "hf-bf16")
    throw Error("unknown checkpoint layout '" + opt.layout + "' (expected mlx-4bit or hf-bf16)");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create directory " + dir + ": " + ec.message());

  int bpe = opt.bpe_vocab > 0 ? opt.bpe_vocab : std::max(256, w.cfg.vocab / 4096 * 4096);
  if (bpe > w.cfg.vocab) throw Error("tokenizer BPE size " + std::to_string(bpe) + " exceeds vocab_size");
  const int n_added = std::min(33, w.cfg.vocab - bpe);

  auto tensors = mlx ? mlx_tensors(w, opt.recipe) : hf_bf16_tensors(w);
  for (const TensorOut& t : opt.extra) tensors.push_back(t);
  int n_shards = 0;
  auto shard_of = assign_shards(tensors, opt.max_shard_bytes, &n_shards);
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.nbytes();

  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  uint64_t done = 0;
  for (int s = 0; s < n_shards; ++s) {
    std::vector<TensorOut> part;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (shard_of[i] != s) continue;
      auto t = tensors[i];
      auto inner = t.produce;
      uint64_t n = t.nbytes();
      t.produce = [inner, n, &done, total, &progress](TensorSink& sink) {
        inner(sink);
        done += n;
        if (progress) progress(done, total);
      };
      part.push_back(std::move(t));
      map[tensors[i].name] = shard_name(s, n_shards);
    }
    write_safetensors_file((fs::path(dir) / shard_name(s, n_shards)).string(), part, opt.style);
  }
  index["weight_map"] = map;
  write_text((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(2) + "\n");
  if (opt.base_config) {
    nlohmann::ordered_json cfg = *opt.base_config;
    cfg.erase("quantization");
    cfg.erase("quantization_config");
    if (mlx) {
      const nlohmann::ordered_json q = mlx_quantization(w.cfg, opt.recipe);
      cfg["quantization"] = q;
      cfg["quantization_config"] = q;
    }
    write_text((fs::path(dir) / "config.json").string(), cfg.dump(2) + "\n");
    for (const char* f : {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                          "special_tokens_map.json", "vocab.json", "merges.txt"}) {
      const fs::path src = fs::path(opt.copy_files_from) / f;
      std::error_code cec;
      if (opt.copy_files_from.empty() || !fs::is_regular_file(src, cec)) continue;
      if (!fs::copy_file(src, fs::path(dir) / f, fs::copy_options::overwrite_existing, cec) || cec)
        throw Error("cannot copy " + src.string() + " to " + dir + ": " + cec.message());
    }
    return;
  }
  write_text((fs::path(dir) / "config.json").string(), checkpoint_config(w.cfg, mlx, bpe).dump(2) + "\n");
  nlohmann::ordered_json gen = {{"bos_token_id", bpe}, {"eos_token_id", {bpe + 2, bpe}}, {"pad_token_id", bpe},
                                {"do_sample", false}};
  write_text((fs::path(dir) / "generation_config.json").string(), gen.dump(2) + "\n");
  write_text((fs::path(dir) / "tokenizer.json").string(), make_synthetic_tokenizer(bpe, n_added).dump() + "\n");
}

}  // namespace lily
