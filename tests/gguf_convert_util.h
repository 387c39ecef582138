// Test helper: writes the tiny bf16 fixture as a GGUF file laid out as llama.cpp's converter lays out a
// qwen35moe model (names, +1 on RMSNorm weights except the gated norm, -exp(A_log), squeezed conv1d, value
// heads in tiled order, experts split into ffn_gate_exps / ffn_up_exps, shared-expert gate [1, H], qwen35moe.*
// metadata). Matrices get `type` (optionally stored as F32 after a quantise/decode round trip, giving the
// "dequantised" twin of a quantised file); 1-D tensors, the router and conv1d stay F32, as the converter
// and llama-quantize keep them.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "io/gguf_quants.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "model/config.h"
#include "synth/gguf_checkpoint.h"

namespace lily_test {

inline std::vector<float> st_f32(const lily::TensorView& t) {
  std::vector<float> v(size_t(t.numel()));
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    v[i] = t.dtype == lily::DType::BF16 ? lily::bf16_to_f32(h) : lily::f16_to_f32(h);
    if (t.dtype == lily::DType::F32) std::memcpy(&v[i], p + 4 * i, 4);
  }
  return v;
}

struct TinyGgufOptions {
  lily::GgmlType type = lily::GgmlType::F32;  // matrices
  bool dequantised_twin = false;             // store matrices as F32 of decode(quantise(x))
  bool fused_gate_up = false;                // experts' gate and up as one ffn_gate_up_exps [E, 2I, H]
};

inline void convert_tiny_to_gguf(const std::string& dir, const std::string& out, const TinyGgufOptions& o) {
  using namespace lily;
  const std::string cfg_path = dir + "/config.json";
  const ModelConfig c = parse_config(read_text_file(cfg_path), cfg_path);
  CheckpointFiles files(dir);
  GgufWriter w;
  gguf_add_model_metadata(c, w);  // the same keys lily synth --gguf writes
  const std::string a = "qwen35moe.";

  auto f32_tensor = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    w.add_tensor(name, GgmlType::F32, shape, std::move(b));
  };
  auto matrix = [&](const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& v) {
    if (o.type == GgmlType::F32) return f32_tensor(name, shape, v);
    std::vector<uint8_t> q = gguf_quantize(o.type, v.data(), int64_t(v.size()));
    if (!o.dequantised_twin) return w.add_tensor(name, o.type, shape, std::move(q));
    std::vector<float> d(v.size());
    gguf_dequant_row(uint32_t(o.type), q.data(), int64_t(v.size()), d.data());
    f32_tensor(name, shape, d);
  };
  // Value heads grouped (g*r + j) -> tiled (j*Hk + g): tiled head t holds grouped head (t % Hk)*r + t / Hk.
  const int64_t Hk = c.lin_k_heads, Hv = c.lin_v_heads, r = Hv / Hk, Dv = c.lin_v_dim;
  auto tiled_src = [&](int64_t t) { return (t % Hk) * r + t / Hk; };
  auto reorder_rows = [&](const std::vector<float>& v, int64_t row0, int64_t head_dim, int64_t cols) {
    std::vector<float> out = v;
    for (int64_t t = 0; t < Hv; ++t)
      std::memcpy(&out[size_t((row0 + t * head_dim) * cols)], &v[size_t((row0 + tiled_src(t) * head_dim) * cols)],
                  size_t(head_dim * cols) * 4);
    return out;
  };
  auto get = [&](const std::string& n) { return st_f32(files.get(n)); };
  const std::string P = "model.language_model.";
  const int64_t H = c.hidden, V = c.vocab, E = c.n_experts, I = c.expert_inter, Is = c.shared_inter;
  auto plus1 = [](std::vector<float> v) {
    for (float& x : v) x += 1.0f;
    return v;
  };
  matrix("token_embd.weight", {V, H}, get(P + "embed_tokens.weight"));
  f32_tensor("output_norm.weight", {H}, plus1(get(P + "norm.weight")));
  if (files.find("lm_head.weight")) matrix("output.weight", {V, H}, get("lm_head.weight"));
  for (int i = 0; i < c.n_layers; ++i) {
    const std::string p = P + "layers." + std::to_string(i) + ".", b = "blk." + std::to_string(i) + ".";
    f32_tensor(b + "attn_norm.weight", {H}, plus1(get(p + "input_layernorm.weight")));
    f32_tensor(b + "post_attention_norm.weight", {H}, plus1(get(p + "post_attention_layernorm.weight")));
    if (c.is_full[size_t(i)]) {
      const int64_t hd = c.head_dim;
      matrix(b + "attn_q.weight", {c.q_proj_rows(), H}, get(p + "self_attn.q_proj.weight"));
      matrix(b + "attn_k.weight", {c.kv_dim(), H}, get(p + "self_attn.k_proj.weight"));
      matrix(b + "attn_v.weight", {c.kv_dim(), H}, get(p + "self_attn.v_proj.weight"));
      matrix(b + "attn_output.weight", {H, c.n_q_heads * hd}, get(p + "self_attn.o_proj.weight"));
      f32_tensor(b + "attn_q_norm.weight", {hd}, plus1(get(p + "self_attn.q_norm.weight")));
      f32_tensor(b + "attn_k_norm.weight", {hd}, plus1(get(p + "self_attn.k_norm.weight")));
    } else {
      const std::string l = p + "linear_attn.";
      const int64_t C = c.conv_dim(), K = c.conv_kernel, qk = 2 * int64_t(c.key_dim());
      matrix(b + "attn_qkv.weight", {C, H}, reorder_rows(get(l + "in_proj_qkv.weight"), qk, Dv, H));
      matrix(b + "attn_gate.weight", {c.value_dim(), H}, reorder_rows(get(l + "in_proj_z.weight"), 0, Dv, H));
      matrix(b + "ssm_beta.weight", {Hv, H}, reorder_rows(get(l + "in_proj_b.weight"), 0, 1, H));
      matrix(b + "ssm_alpha.weight", {Hv, H}, reorder_rows(get(l + "in_proj_a.weight"), 0, 1, H));
      f32_tensor(b + "ssm_conv1d.weight", {C, K}, reorder_rows(get(l + "conv1d.weight"), qk, Dv, K));
      f32_tensor(b + "ssm_dt.bias", {Hv}, reorder_rows(get(l + "dt_bias"), 0, 1, 1));
      std::vector<float> al = get(l + "A_log");
      for (float& x : al) x = float(-std::exp(double(x)));
      f32_tensor(b + "ssm_a", {Hv}, reorder_rows(al, 0, 1, 1));
      f32_tensor(b + "ssm_norm.weight", {Dv}, get(l + "norm.weight"));
      // out_proj [H, value_dim]: column blocks of Dv move like the heads.
      const std::vector<float> op = get(l + "out_proj.weight");
      std::vector<float> ot = op;
      const int64_t VD = c.value_dim();
      for (int64_t row = 0; row < H; ++row)
        for (int64_t t = 0; t < Hv; ++t)
          std::memcpy(&ot[size_t(row * VD + t * Dv)], &op[size_t(row * VD + tiled_src(t) * Dv)], size_t(Dv) * 4);
      matrix(b + "ssm_out.weight", {H, VD}, ot);
    }
    f32_tensor(b + "ffn_gate_inp.weight", {E, H}, get(p + "mlp.gate.weight"));
    const std::vector<float> gu = get(p + "mlp.experts.gate_up_proj");  // [E, 2I, H], gate rows first
    if (o.fused_gate_up) matrix(b + "ffn_gate_up_exps.weight", {E, 2 * I, H}, gu);
    std::vector<float> g(size_t(E * I * H)), u(size_t(E * I * H));
    for (int64_t e = 0; e < E; ++e) {
      std::memcpy(&g[size_t(e * I * H)], &gu[size_t(e * 2 * I * H)], size_t(I * H) * 4);
      std::memcpy(&u[size_t(e * I * H)], &gu[size_t((e * 2 + 1) * I * H)], size_t(I * H) * 4);
    }
    if (!o.fused_gate_up) {
      matrix(b + "ffn_gate_exps.weight", {E, I, H}, g);
      matrix(b + "ffn_up_exps.weight", {E, I, H}, u);
    }
    matrix(b + "ffn_down_exps.weight", {E, H, I}, get(p + "mlp.experts.down_proj"));
    matrix(b + "ffn_gate_shexp.weight", {Is, H}, get(p + "mlp.shared_expert.gate_proj.weight"));
    matrix(b + "ffn_up_shexp.weight", {Is, H}, get(p + "mlp.shared_expert.up_proj.weight"));
    matrix(b + "ffn_down_shexp.weight", {H, Is}, get(p + "mlp.shared_expert.down_proj.weight"));
    f32_tensor(b + "ffn_gate_inp_shexp.weight", {1, H}, get(p + "mlp.shared_expert_gate.weight"));  // as the converter
  }
  w.write(out);
}

}  // namespace lily_test
