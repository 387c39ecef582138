#include "synth/module_plan.h"

#include "core/error.h"

namespace lily {

int64_t VectorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

std::vector<ModuleSpec> plan_modules(const ModelConfig& c) {
  std::vector<ModuleSpec> out;
  auto add = [&](std::string name, MatSlot s, int layer, int64_t rows, int64_t cols, int count, int bits,
                 float gain) {
    ModuleSpec m;
    m.name = std::move(name);
    m.slot = s;
    m.layer = layer;
    m.rows = rows;
    m.cols = cols;
    m.count = count;
    m.bits = bits;
    m.gain = gain;
    if (cols % m.group) throw Error("synthetic model: " + m.name + " has " + std::to_string(cols) +
                                    " input columns, not a multiple of the group size 64");
    out.push_back(std::move(m));
  };
  const int64_t H = c.hidden;
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "language_model.model.layers." + std::to_string(i) + ".";
    if (c.is_full[size_t(i)]) {
      add(p + "self_attn.q_proj", MatSlot::AttnQ, i, c.q_proj_rows(), H, 1, 4, 1.0f);
      add(p + "self_attn.k_proj", MatSlot::AttnK, i, c.kv_dim(), H, 1, 4, 1.0f);
      add(p + "self_attn.v_proj", MatSlot::AttnV, i, c.kv_dim(), H, 1, 4, 1.0f);
      add(p + "self_attn.o_proj", MatSlot::AttnO, i, H, int64_t(c.n_q_heads) * c.head_dim, 1, 4, 1.0f);
    } else {
      add(p + "linear_attn.in_proj_qkv", MatSlot::LinQkv, i, c.conv_dim(), H, 1, 4, 1.0f);
      add(p + "linear_attn.in_proj_z", MatSlot::LinZ, i, c.value_dim(), H, 1, 4, 1.0f);
      add(p + "linear_attn.in_proj_b", MatSlot::LinB, i, c.lin_v_heads, H, 1, 4, 1.0f);
      add(p + "linear_attn.in_proj_a", MatSlot::LinA, i, c.lin_v_heads, H, 1, 4, 1.0f);
      add(p + "linear_attn.out_proj", MatSlot::LinOut, i, H, c.value_dim(), 1, 4, 1.0f);
    }
    // The router is larger than the rest so that the top-k set changes from token to token.
    add(p + "mlp.gate", MatSlot::Router, i, c.n_experts, H, 1, 8, 4.0f);
    add(p + "mlp.shared_expert_gate", MatSlot::ShGateW, i, 1, H, 1, 8, 1.0f);
    add(p + "mlp.shared_expert.gate_proj", MatSlot::ShGate, i, c.shared_inter, H, 1, 4, 1.0f);
    add(p + "mlp.shared_expert.up_proj", MatSlot::ShUp, i, c.shared_inter, H, 1, 4, 1.0f);
    add(p + "mlp.shared_expert.down_proj", MatSlot::ShDown, i, H, c.shared_inter, 1, 4, 1.0f);
    add(p + "mlp.switch_mlp.gate_proj", MatSlot::ExpGate, i, c.expert_inter, H, c.n_experts, 4, 1.0f);
    add(p + "mlp.switch_mlp.up_proj", MatSlot::ExpUp, i, c.expert_inter, H, c.n_experts, 4, 1.0f);
    add(p + "mlp.switch_mlp.down_proj", MatSlot::ExpDown, i, H, c.expert_inter, c.n_experts, 4, 1.0f);
  }
  add("language_model.model.embed_tokens", MatSlot::Embed, -1, c.vocab, H, 1, 4, 1.0f);
  add("language_model.lm_head", MatSlot::LmHead, -1, c.vocab, H, 1, 4, 1.0f);
  return out;
}

std::vector<VectorSpec> plan_vectors(const ModelConfig& c) {
  std::vector<VectorSpec> out;
  auto add = [&](std::string name, VecSlot s, int layer, std::vector<int64_t> shape) {
    out.push_back(VectorSpec{std::move(name), s, layer, std::move(shape)});
  };
  for (int i = 0; i < c.n_layers; ++i) {
    std::string p = "language_model.model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", VecSlot::InNorm, i, {c.hidden});
    add(p + "post_attention_layernorm.weight", VecSlot::PostNorm, i, {c.hidden});
    if (c.is_full[size_t(i)]) {
      add(p + "self_attn.q_norm.weight", VecSlot::QNorm, i, {c.head_dim});
      add(p + "self_attn.k_norm.weight", VecSlot::KNorm, i, {c.head_dim});
    } else {
      add(p + "linear_attn.conv1d.weight", VecSlot::Conv, i, {c.conv_dim(), c.conv_kernel, 1});
      add(p + "linear_attn.dt_bias", VecSlot::DtBias, i, {c.lin_v_heads});
      add(p + "linear_attn.A_log", VecSlot::ALog, i, {c.lin_v_heads});
      add(p + "linear_attn.norm.weight", VecSlot::LinNorm, i, {c.lin_v_dim});
    }
  }
  add("language_model.model.norm.weight", VecSlot::FinalNorm, -1, {c.hidden});
  return out;
}

namespace {
template <class W>
auto& matrix_of(W& w, const ModuleSpec& m, int index) {
  if (m.layer < 0) return m.slot == MatSlot::Embed ? w.embed : w.lm_head;
  auto& L = w.layers.at(size_t(m.layer));
  switch (m.slot) {
    case MatSlot::LinQkv: return L.lin.in_qkv;
    case MatSlot::LinZ: return L.lin.in_z;
    case MatSlot::LinB: return L.lin.in_b;
    case MatSlot::LinA: return L.lin.in_a;
    case MatSlot::LinOut: return L.lin.out;
    case MatSlot::AttnQ: return L.attn.q;
    case MatSlot::AttnK: return L.attn.k;
    case MatSlot::AttnV: return L.attn.v;
    case MatSlot::AttnO: return L.attn.o;
    case MatSlot::Router: return L.moe.router;
    case MatSlot::ShGateW: return L.moe.sh_gate_w;
    case MatSlot::ShGate: return L.moe.sh_gate;
    case MatSlot::ShUp: return L.moe.sh_up;
    case MatSlot::ShDown: return L.moe.sh_down;
    case MatSlot::ExpGate: return L.moe.gate.e.at(size_t(index));
    case MatSlot::ExpUp: return L.moe.up.e.at(size_t(index));
    case MatSlot::ExpDown: return L.moe.down.e.at(size_t(index));
    default: break;
  }
  throw Error("module " + m.name + ": slot does not belong to a layer");
}

template <class W>
auto& vector_of(W& w, const VectorSpec& v) {
  if (v.slot == VecSlot::FinalNorm) return w.final_norm;
  auto& L = w.layers.at(size_t(v.layer));
  switch (v.slot) {
    case VecSlot::InNorm: return L.in_norm;
    case VecSlot::PostNorm: return L.post_norm;
    case VecSlot::QNorm: return L.attn.q_norm;
    case VecSlot::KNorm: return L.attn.k_norm;
    case VecSlot::LinNorm: return L.lin.norm;
    case VecSlot::Conv: return L.lin.conv;
    case VecSlot::DtBias: return L.lin.dt_bias;
    case VecSlot::ALog: return L.lin.a_neg;
    default: break;
  }
  throw Error("vector " + v.name + ": unknown slot");
}
}  // namespace

QMatrix& slot_matrix(ModelWeights& w, const ModuleSpec& m, int index) { return matrix_of(w, m, index); }
const QMatrix& slot_matrix(const ModelWeights& w, const ModuleSpec& m, int index) { return matrix_of(w, m, index); }
std::vector<float>& slot_vector(ModelWeights& w, const VectorSpec& v) { return vector_of(w, v); }
const std::vector<float>& slot_vector(const ModelWeights& w, const VectorSpec& v) { return vector_of(w, v); }

std::shared_ptr<ModelWeights> empty_model(const ModelConfig& cfg, const std::string& layout) {
  auto w = std::make_shared<ModelWeights>();
  w->cfg = cfg;
  w->layout = layout;
  w->layers.resize(size_t(cfg.n_layers));
  for (int i = 0; i < cfg.n_layers; ++i) {
    auto& L = w->layers[size_t(i)];
    L.is_full = cfg.is_full.at(size_t(i));
    L.moe.gate.e.resize(size_t(cfg.n_experts));
    L.moe.up.e.resize(size_t(cfg.n_experts));
    L.moe.down.e.resize(size_t(cfg.n_experts));
  }
  return w;
}

size_t qmatrix_bytes(const QMatrix& m) { return m.bytes(); }

}  // namespace lily
