// load_model: config + checkpoint directory -> ModelWeights. Layouts (by tensor names):
//  - Hugging Face multimodal (Qwen3_5MoeForConditionalGeneration): model.language_model.*, lm_head;
//  - Hugging Face text-only (Qwen3_5MoeForCausalLM fine-tunes): model.*, lm_head;
//  - MLX (mlx-lm / mlx-vlm conversions): language_model.model.*, language_model.lm_head (norms stored +1).
// Zero-centred norms (+1 at load) and conv1d [C, 1, K] for the Hugging Face layouts, folded norms and [C, K, 1]
// for MLX (a text-only checkpoint with model.* names is told apart by its conv1d shape). Matrix formats are the
// WeightReader's. Vision tensors are skipped; multi-token-prediction tensors (mtp.*) are listed, not loaded.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "model/gguf_weights.h"
#include "model/quant_config.h"
#include "model/weight_reader.h"
#include "model/weights.h"

namespace lily {

namespace fs = std::filesystem;

namespace {

struct Layout {
  std::string name;     // ModelWeights::layout
  std::string prefix;   // text model prefix, "model.language_model." / "language_model.model."
  std::string lm_head;  // lm_head module (without ".weight")
  bool hf = false;      // zero-centred norms (+1 at load), conv1d [C, 1, K]
};

const char* method_suffix(QuantMethod m) {
  switch (m) {
    case QuantMethod::Fp8: return "-fp8";
    case QuantMethod::Gptq: return "-gptq";
    case QuantMethod::Awq: return "-awq";
    case QuantMethod::CompressedTensors: return "-compressed-tensors";
    default: return "";
  }
}

Layout detect_layout(const CheckpointFiles& files, const ModelConfig& c, QuantMethod qm) {
  if (files.find("model.language_model.embed_tokens.weight"))
    return {std::string("hf") + (qm == QuantMethod::None ? "-bf16" : method_suffix(qm)), "model.language_model.", "lm_head", true};
  if (files.find("language_model.model.embed_tokens.weight"))
    return {"mlx-affine", "language_model.model.", "language_model.lm_head", false};
  if (files.find("model.embed_tokens.weight")) {
    // Text-only: Hugging Face (conv1d [C, 1, K]) or an MLX conversion of it ([C, K, 1]).
    bool mlx = false;
    for (int i = 0; i < c.n_layers; ++i) {
      if (c.is_full[size_t(i)]) continue;
      if (const TensorView* t = files.find("model.layers." + std::to_string(i) + ".linear_attn.conv1d.weight"))
        mlx = t->shape.size() == 3 && t->shape[2] == 1 && t->shape[1] != 1;
      break;
    }
    if (mlx) return {"mlx-text", "model.", "lm_head", false};
    return {std::string("hf-text") + method_suffix(qm), "model.", "lm_head", true};
  }
  throw Error("cannot detect the checkpoint layout: expected tensor 'model.language_model.embed_tokens.weight' (Hugging "
              "Face), 'model.embed_tokens.weight' (Hugging Face text-only) or 'language_model.model.embed_tokens.weight' "
              "(MLX), found none (searched " + files.files_searched() + ")");
}

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

bool is_mtp(const std::string& n) {
  return starts_with(n, "mtp.") || starts_with(n, "language_model.mtp.") || starts_with(n, "model.mtp.") ||
         starts_with(n, "model.language_model.mtp.");
}

void load_layer_at(WeightReader& rd, const CheckpointFiles& files, const ModelConfig& c, const std::string& p,
                   bool is_full, bool hf, LayerWeights& lw);

void load_experts(WeightReader& rd, const CheckpointFiles& files, const ModelConfig& c, const std::string& p,
                  MoeWeights& moe) {
  const int64_t E = c.n_experts, I = c.expert_inter, H = c.hidden;
  const std::string fused = p + "mlp.experts.gate_up_proj";
  const std::string sw = p + "mlp.switch_mlp.";
  const std::string per = p + "mlp.experts.0.gate_proj.weight";
  if (rd.has(fused)) {  // HF fused: gate_up [E, 2I, H], down [E, H, I], no ".weight"
    moe.gate = rd.stacked(fused, fused, E, 2 * I, H, 0, I);
    moe.up = rd.stacked(fused, fused, E, 2 * I, H, I, I);
    const std::string down = p + "mlp.experts.down_proj";
    moe.down = rd.stacked(down, down, E, H, I, 0, H);
  } else if (rd.has(sw + "gate_proj.weight")) {  // MLX stacked: switch_mlp.{gate,up,down}_proj [E, out, in']
    moe.gate = rd.stacked(sw + "gate_proj", sw + "gate_proj.weight", E, I, H, 0, I);
    moe.up = rd.stacked(sw + "up_proj", sw + "up_proj.weight", E, I, H, 0, I);
    moe.down = rd.stacked(sw + "down_proj", sw + "down_proj.weight", E, H, I, 0, H);
  } else if (rd.has(per) || rd.has(p + "mlp.experts.0.gate_proj.qweight") ||
             rd.has(p + "mlp.experts.0.gate_proj.weight_packed")) {  // one tensor (set) per expert
    for (int64_t e = 0; e < E; ++e) {
      const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
      moe.gate.e.push_back(rd.matrix(q + "gate_proj", I, H));
      moe.up.e.push_back(rd.matrix(q + "up_proj", I, H));
      moe.down.e.push_back(rd.matrix(q + "down_proj", H, I));
    }
  } else {
    throw Error("tensor '" + fused + "' not found, nor '" + sw + "gate_proj.weight' nor '" + per + "' (searched " +
                files.files_searched() + ")");
  }
}

// One decoder layer under prefix p ("...layers.N."); hf: zero-centred norms stored raw (+1 at load), conv1d [C, 1, K].
void load_layer_at(WeightReader& rd, const CheckpointFiles& files, const ModelConfig& c, const std::string& p,
                   bool is_full, bool hf, LayerWeights& lw) {
  const Layout L{"", "", "", hf};
  const int64_t H = c.hidden;
  const float fold = L.hf ? 1.0f : 0.0f;
  lw.is_full = is_full;
  lw.in_norm = rd.vec_f32(p + "input_layernorm.weight", {H}, fold);
  lw.post_norm = rd.vec_f32(p + "post_attention_layernorm.weight", {H}, fold);
  if (lw.is_full) {
    const std::string a = p + "self_attn.";
    const int64_t hd = c.head_dim;
    lw.attn.q = rd.matrix(a + "q_proj", c.q_proj_rows(), H);
    lw.attn.k = rd.matrix(a + "k_proj", c.kv_dim(), H);
    lw.attn.v = rd.matrix(a + "v_proj", c.kv_dim(), H);
    lw.attn.o = rd.matrix(a + "o_proj", H, int64_t(c.n_q_heads) * hd);
    lw.attn.q_norm = rd.vec_f32(a + "q_norm.weight", {hd}, fold);
    lw.attn.k_norm = rd.vec_f32(a + "k_norm.weight", {hd}, fold);
  } else {
    const std::string a = p + "linear_attn.";
    const int64_t C = c.conv_dim(), K = c.conv_kernel, Hv = c.lin_v_heads;
    lw.lin.in_qkv = rd.matrix(a + "in_proj_qkv", C, H);
    lw.lin.in_z = rd.matrix(a + "in_proj_z", c.value_dim(), H);
    lw.lin.in_b = rd.matrix(a + "in_proj_b", Hv, H);
    lw.lin.in_a = rd.matrix(a + "in_proj_a", Hv, H);
    // [C, 1, K] (HF) and [C, K, 1] (MLX) hold the same bytes: channel-major, then tap.
    lw.lin.conv = rd.vec_f32(a + "conv1d.weight", L.hf ? std::vector<int64_t>{C, 1, K} : std::vector<int64_t>{C, K, 1});
    lw.lin.dt_bias = rd.vec_f32(a + "dt_bias", {Hv});
    std::vector<float> a_log = rd.vec_f32(a + "A_log", {Hv});
    lw.lin.a_neg.resize(a_log.size());
    for (size_t h = 0; h < a_log.size(); ++h) lw.lin.a_neg[h] = float(-std::exp(double(a_log[h])));
    lw.lin.norm = rd.vec_f32(a + "norm.weight", {c.lin_v_dim});  // plain weight, never +1
    lw.lin.out = rd.matrix(a + "out_proj", H, c.value_dim());
  }
  MoeWeights& m = lw.moe;
  m.router = rd.matrix(p + "mlp.gate", c.n_experts, H);
  load_experts(rd, files, c, p, m);
  const std::string s = p + "mlp.shared_expert.";
  m.sh_gate = rd.matrix(s + "gate_proj", c.shared_inter, H);
  m.sh_up = rd.matrix(s + "up_proj", c.shared_inter, H);
  m.sh_down = rd.matrix(s + "down_proj", H, c.shared_inter);
  m.sh_gate_w = rd.matrix(p + "mlp.shared_expert_gate", 1, H);
}

void load_layer(WeightReader& rd, const CheckpointFiles& files, const ModelConfig& c, const Layout& L, int i,
                LayerWeights& lw) {
  load_layer_at(rd, files, c, L.prefix + "layers." + std::to_string(i) + ".", c.is_full[size_t(i)], L.hf, lw);
}

const char* const kMtpPrefixes[] = {"mtp.", "model.mtp.", "language_model.mtp.", "model.language_model.mtp."};

}  // namespace

std::shared_ptr<ModelWeights> load_model(const std::string& dir) {
  if (is_gguf_path(dir)) return load_model_gguf(dir);
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  const std::string cfg_text = read_text_file(cfg_path);
  auto w = std::make_shared<ModelWeights>();
  w->source_dir = dir;
  w->cfg = parse_config(cfg_text, cfg_path);
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(gen_path, ec)) merge_generation_config(read_text_file(gen_path), gen_path, &w->cfg);
  const QuantConfig quant = QuantConfig::parse(cfg_text, cfg_path);

  auto files = std::make_shared<const CheckpointFiles>(dir);
  const ModelConfig& c = w->cfg;
  const Layout L = detect_layout(*files, c, quant.method());
  w->layout = L.name;
  WeightReader rd(*files, quant);
  const int64_t H = c.hidden;
  w->embed = rd.matrix(L.prefix + "embed_tokens", c.vocab, H);
  if (!rd.has(L.lm_head + ".weight") && c.tie_embeddings) w->lm_head = w->embed;
  else w->lm_head = rd.matrix(L.lm_head, c.vocab, H);
  w->final_norm = rd.vec_f32(L.prefix + "norm.weight", {H}, L.hf ? 1.0f : 0.0f);
  w->layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) load_layer(rd, *files, c, L, i, w->layers[size_t(i)]);
  for (const std::string& n : files->names())
    if (is_mtp(n)) w->mtp_tensors.push_back(n);
  rd.warn_unused({"model.visual.", "visual.", "vision_tower.", "language_model.vision_tower.", "mtp.", "model.mtp.",
                  "language_model.mtp.", "model.language_model.mtp."});
  w->load_notes = rd.notes();
  if (!w->mtp_tensors.empty())
    w->load_notes.push_back(std::to_string(w->mtp_tensors.size()) +
                            " multi-token-prediction tensor(s) found (loaded only when speculative decoding is on)");
  for (const std::string& n : w->load_notes) std::fprintf(stderr, "lily: %s: %s\n", dir.c_str(), n.c_str());
  w->keep_alive = files->keep_alive();
  for (auto& o : rd.take_owned()) w->keep_alive.push_back(std::move(o));
  w->checkpoint = files;
  return w;
}

void load_mtp(ModelWeights& w, const std::string& dir) {
  const ModelConfig& c = w.cfg;
  std::shared_ptr<const CheckpointFiles> files = w.checkpoint;
  QuantConfig quant;
  std::string where = w.source_dir;
  if (!dir.empty()) {
    where = dir;
    const std::string cfg_path = (fs::path(dir) / "config.json").string();
    std::error_code ec;
    if (fs::exists(cfg_path, ec)) {
      const std::string text = read_text_file(cfg_path);
      const ModelConfig other = parse_config(text, cfg_path);
      if (other.hidden != c.hidden || other.vocab != c.vocab || other.n_experts != c.n_experts ||
          other.head_dim != c.head_dim)
        throw Error(cfg_path + ": --mtp-from checkpoint has hidden " + std::to_string(other.hidden) + ", vocab " +
                    std::to_string(other.vocab) + ", " + std::to_string(other.n_experts) + " experts, head_dim " +
                    std::to_string(other.head_dim) + "; the model has " + std::to_string(c.hidden) + ", " +
                    std::to_string(c.vocab) + ", " + std::to_string(c.n_experts) + ", " + std::to_string(c.head_dim));
      quant = QuantConfig::parse(text, cfg_path);
    }
    files = std::make_shared<const CheckpointFiles>(dir, [](const std::string& n) { return is_mtp(n); });
  } else {
    if (!files) throw Error("no multi-token-prediction weights: the model was not loaded from a checkpoint directory");
    quant = QuantConfig::parse(read_text_file((fs::path(w.source_dir) / "config.json").string()),
                               (fs::path(w.source_dir) / "config.json").string());
  }
  std::string pre;
  for (const char* p : kMtpPrefixes)
    if (files->find(std::string(p) + "fc.weight")) pre = p;
  if (pre.empty())
    throw Error(where + ": no multi-token-prediction block: expected tensor 'mtp.fc.weight' (searched " +
                files->files_searched() + ")");
  WeightReader rd(*files, quant);
  auto m = std::make_shared<MtpWeights>();
  const int64_t H = c.hidden;
  m->source = where;
  m->fc = rd.matrix(pre + "fc", H, 2 * H);
  m->pre_norm_e = rd.vec_f32(pre + "pre_fc_norm_embedding.weight", {H}, 1.0f);
  m->pre_norm_h = rd.vec_f32(pre + "pre_fc_norm_hidden.weight", {H}, 1.0f);
  m->norm = rd.vec_f32(pre + "norm.weight", {H}, 1.0f);
  load_layer_at(rd, *files, c, pre + "layers.0.", true, true, m->layer);
  if (files != w.checkpoint) w.keep_alive.push_back(files);
  for (auto& o : rd.take_owned()) w.keep_alive.push_back(std::move(o));
  w.mtp = std::move(m);
}

}  // namespace lily
