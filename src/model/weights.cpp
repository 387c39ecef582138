// load_model: config + checkpoint directory -> ModelWeights, for the Hugging Face layout (BF16, fused or
// per-expert experts, zero-centred norms) and the MLX layout (affine quantisation, switch_mlp, +1 folded norms).
#include "model/weights.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "model/gguf_weights.h"
#include "model/quant_config.h"
#include "model/weight_reader.h"

namespace lily {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------- QMatrix

size_t QMatrix::row_bytes() const {
  if (kind == Kind::Dense) return size_t(cols) * dtype_size(dtype);
  return size_t(cols) * size_t(bits) / 8;
}

size_t QMatrix::bytes() const {
  size_t b = size_t(rows) * row_bytes();
  if (kind == Kind::Affine && group > 0) b += 2 * size_t(rows) * size_t(cols / group) * dtype_size(sdtype);
  return b;
}

namespace {

float load_scalar(const uint8_t* p, DType d) {
  if (d == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

void dequant_row(const QMatrix& m, int64_t row, float* out) {
  if (!m.valid() || row < 0 || row >= m.rows)
    throw Error("dequant_row: row " + std::to_string(row) + " out of range for a matrix of " + std::to_string(m.rows) +
                " rows");
  if (m.kind == QMatrix::Kind::Dense) {
    const size_t es = dtype_size(m.dtype);
    if (m.dtype != DType::F32 && m.dtype != DType::BF16 && m.dtype != DType::F16)
      throw Error(std::string("dequant_row: expected a dense BF16, F16 or F32 matrix, found ") + dtype_name(m.dtype));
    const auto* p = static_cast<const uint8_t*>(m.w) + size_t(row) * m.row_bytes();
    for (int64_t j = 0; j < m.cols; ++j) out[j] = load_scalar(p + size_t(j) * es, m.dtype);
    return;
  }
  if ((m.bits != 2 && m.bits != 4 && m.bits != 8) || m.group <= 0 || m.cols % m.group != 0)
    throw Error("dequant_row: unsupported affine matrix (bits " + std::to_string(m.bits) + ", group " +
                std::to_string(m.group) + ", cols " + std::to_string(m.cols) + ")");
  const int per = 32 / m.bits;
  const uint32_t mask = (1u << m.bits) - 1u;
  const size_t ng = size_t(m.cols / m.group), ss = dtype_size(m.sdtype);
  const auto* w = static_cast<const uint8_t*>(m.w) + size_t(row) * m.row_bytes();
  const auto* s = static_cast<const uint8_t*>(m.scales) + size_t(row) * ng * ss;
  const auto* b = static_cast<const uint8_t*>(m.biases) + size_t(row) * ng * ss;
  for (size_t gi = 0; gi < ng; ++gi) {
    const float scale = load_scalar(s + gi * ss, m.sdtype), bias = load_scalar(b + gi * ss, m.sdtype);
    for (int64_t j = int64_t(gi) * m.group; j < int64_t(gi + 1) * m.group; ++j) {
      uint32_t word;
      std::memcpy(&word, w + size_t(j / per) * 4, 4);  // little-endian u32 (host is little-endian)
      const uint32_t q = (word >> ((j % per) * m.bits)) & mask;
      out[j] = scale * float(q) + bias;
    }
  }
}

// ---------------------------------------------------------------------------------------------- loading

namespace {

struct Layout {
  std::string name;     // ModelWeights::layout
  std::string prefix;   // text model prefix, "model.language_model." / "language_model.model."
  std::string lm_head;  // lm_head module (without ".weight")
  bool hf = false;      // zero-centred norms (+1 at load), conv1d [C, 1, K]
};

Layout detect_layout(const CheckpointFiles& files) {
  if (files.find("model.language_model.embed_tokens.weight"))
    return {"hf-bf16", "model.language_model.", "lm_head", true};
  if (files.find("language_model.model.embed_tokens.weight"))
    return {"mlx-affine", "language_model.model.", "language_model.lm_head", false};
  throw Error("cannot detect the checkpoint layout: expected tensor 'model.language_model.embed_tokens.weight' (Hugging "
              "Face) or 'language_model.model.embed_tokens.weight' (MLX), found neither (searched " +
              files.files_searched() + ")");
}

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
  } else if (rd.has(per)) {  // one tensor per expert
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

void load_layer(WeightReader& rd, const CheckpointFiles& files, const ModelConfig& c, const Layout& L, int i,
                LayerWeights& lw) {
  const std::string p = L.prefix + "layers." + std::to_string(i) + ".";
  const int64_t H = c.hidden;
  const float fold = L.hf ? 1.0f : 0.0f;
  lw.is_full = c.is_full[size_t(i)];
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

}  // namespace

std::shared_ptr<ModelWeights> load_model(const std::string& dir) {
  if (is_gguf_path(dir)) return load_model_gguf(dir);
  const std::string cfg_path = (fs::path(dir) / "config.json").string();
  const std::string cfg_text = read_text_file(cfg_path);
  auto w = std::make_shared<ModelWeights>();
  w->cfg = parse_config(cfg_text, cfg_path);
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::exists(gen_path, ec)) merge_generation_config(read_text_file(gen_path), gen_path, &w->cfg);
  const QuantConfig quant = QuantConfig::parse(cfg_text, cfg_path);

  CheckpointFiles files(dir);
  const Layout L = detect_layout(files);
  w->layout = L.name;
  WeightReader rd(files, quant);
  const ModelConfig& c = w->cfg;
  const int64_t H = c.hidden;
  w->embed = rd.matrix(L.prefix + "embed_tokens", c.vocab, H);
  if (!rd.has(L.lm_head + ".weight") && c.tie_embeddings) w->lm_head = w->embed;
  else w->lm_head = rd.matrix(L.lm_head, c.vocab, H);
  w->final_norm = rd.vec_f32(L.prefix + "norm.weight", {H}, L.hf ? 1.0f : 0.0f);
  w->layers.resize(size_t(c.n_layers));
  for (int i = 0; i < c.n_layers; ++i) load_layer(rd, files, c, L, i, w->layers[size_t(i)]);
  rd.warn_unused({"model.visual.", "mtp.", "model.mtp.", "vision_tower.", "language_model.vision_tower."});
  w->keep_alive = files.keep_alive();
  return w;
}

}  // namespace lily
