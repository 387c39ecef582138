#include "synth/presets.h"

#include "core/error.h"

namespace lily {

namespace {

ModelConfig base_shapes(int hidden, int layers, int nq, int nkv, int hd, int hk, int hv, int dk, int experts,
                        int top_k, int inter, int vocab, int max_pos, std::vector<int> eos) {
  ModelConfig c;
  c.model_type = "qwen3_5_moe";
  c.hidden = hidden;
  c.n_layers = layers;
  c.is_full.resize(size_t(layers));
  for (int i = 0; i < layers; ++i) c.is_full[size_t(i)] = (i + 1) % 4 == 0;
  c.vocab = vocab;
  c.rms_eps = 1e-6f;
  c.n_q_heads = nq;
  c.n_kv_heads = nkv;
  c.head_dim = hd;
  c.rope_dim = hd / 4;  // partial_rotary_factor 0.25
  c.rope_theta = 1e7;
  c.lin_k_heads = hk;
  c.lin_v_heads = hv;
  c.lin_k_dim = dk;
  c.lin_v_dim = dk;
  c.conv_kernel = 4;
  c.n_experts = experts;
  c.top_k = top_k;
  c.expert_inter = inter;
  c.shared_inter = inter;
  c.max_pos = max_pos;
  c.eos_ids = std::move(eos);
  return c;
}

}  // namespace

std::vector<std::string> synthetic_presets() { return {"qwen3.6-35b-a3b", "medium", "small", "tiny"}; }

ModelConfig make_synthetic_config(const std::string& preset) {
  if (preset == "qwen3.6-35b-a3b")
    return base_shapes(2048, 40, 16, 2, 256, 16, 32, 128, 256, 8, 512, 248320, 262144, {248046, 248044});
  if (preset == "medium")  // the real matrices, 4 layers, 32 experts, a tenth of the vocabulary (lm_head's share)
    return base_shapes(2048, 4, 16, 2, 256, 16, 32, 128, 32, 8, 512, 24832, 32768, {4098, 4096});
  if (preset == "small") return base_shapes(512, 4, 4, 1, 256, 2, 4, 128, 32, 8, 128, 4160, 8192, {4098, 4096});
  if (preset == "tiny") return base_shapes(128, 4, 4, 1, 64, 2, 4, 32, 16, 4, 64, 4160, 8192, {4098, 4096});
  std::string known;
  for (const auto& p : synthetic_presets()) known += (known.empty() ? "" : ", ") + p;
  throw Error("unknown synthetic preset '" + preset + "' (known: " + known + ")");
}

int synthetic_bpe_vocab(const std::string& preset) {
  make_synthetic_config(preset);  // validates the name
  return preset == "qwen3.6-35b-a3b" ? 248044 : 4096;
}

std::array<int, 3> default_mrope_sections(int rope_dim) {
  const int half = rope_dim / 2;
  const int s0 = (half + 2) / 3, s1 = (half - s0 + 1) / 2;
  return {s0, s1, half - s0 - s1};
}

}  // namespace lily
