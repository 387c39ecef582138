// parse_config / merge_generation_config / QuantConfig.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "loader_test_util.h"
#include "model/config.h"
#include "model/quant_config.h"

using namespace lily;
using namespace lily_test;
using nlohmann::json;

namespace {

json flat_text_config() {
  return json{{"model_type", "qwen3_5_moe_text"},
              {"hidden_size", 2048},
              {"num_hidden_layers", 8},
              {"vocab_size", 248320},
              {"num_attention_heads", 16},
              {"num_key_value_heads", 2},
              {"head_dim", 256},
              {"linear_num_key_heads", 16},
              {"linear_num_value_heads", 32},
              {"linear_key_head_dim", 128},
              {"linear_value_head_dim", 128},
              {"linear_conv_kernel_dim", 4},
              {"num_experts", 256},
              {"num_experts_per_tok", 8},
              {"moe_intermediate_size", 512},
              {"shared_expert_intermediate_size", 512},
              {"full_attention_interval", 4},
              {"rope_theta", 1e7},
              {"partial_rotary_factor", 0.25},
              {"eos_token_id", json::array({248046, 248044})}};
}

}  // namespace

TEST(Config, TinyNestedTextConfig) {
  const std::string p = tiny("model-bf16/config.json");
  ModelConfig c = parse_config(read_text(p), p);
  EXPECT_EQ(c.model_type, "qwen3_5_moe");
  EXPECT_EQ(c.hidden, 128);
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.is_full, (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(c.n_full_layers(), 1);
  EXPECT_EQ(c.vocab, 4160);
  EXPECT_EQ(c.n_q_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_dim, 16);
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.lin_k_heads, 2);
  EXPECT_EQ(c.lin_v_heads, 4);
  EXPECT_EQ(c.conv_dim(), 2 * 64 + 128);
  EXPECT_EQ(c.n_experts, 16);
  EXPECT_EQ(c.top_k, 4);
  EXPECT_EQ(c.expert_inter, 64);
  EXPECT_EQ(c.shared_inter, 64);
  EXPECT_EQ(c.max_pos, 8192);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_EQ(c.eos_ids, std::vector<int>{4098});
}

TEST(Config, FlatWithIntervalAndTopLevelRope) {
  ModelConfig c = parse_config(flat_text_config().dump(), "config.json");
  EXPECT_EQ(c.model_type, "qwen3_5_moe_text");
  ASSERT_EQ(c.is_full.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.is_full[size_t(i)], (i + 1) % 4 == 0) << i;
  EXPECT_EQ(c.rope_dim, 64);
  EXPECT_EQ(c.q_proj_rows(), 8192);
  EXPECT_EQ(c.kv_dim(), 512);
  EXPECT_EQ(c.conv_dim(), 8192);
  EXPECT_EQ(c.max_pos, 262144);  // default when absent
  EXPECT_EQ(c.eos_ids, (std::vector<int>{248046, 248044}));
  merge_generation_config(R"({"eos_token_id": [248046, 7]})", "generation_config.json", &c);
  EXPECT_EQ(c.eos_ids, (std::vector<int>{248046, 248044, 7}));
  EXPECT_TRUE(contains(error_of([&] { merge_generation_config("{", "generation_config.json", &c); }),
                       "generation_config.json: not valid JSON"));
}

TEST(Config, RopeParametersWinAndNestedShapes) {
  json t = flat_text_config();
  t.erase("rope_theta");
  t.erase("partial_rotary_factor");
  t["rope_parameters"] = {{"rope_theta", 5e6}, {"partial_rotary_factor", 0.5}};
  json top = {{"model_type", "qwen3_5_moe"}, {"text_config", t}};
  ModelConfig c = parse_config(top.dump(), "config.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 5e6);
  EXPECT_EQ(c.rope_dim, 128);
}

TEST(Config, Errors) {
  json t = flat_text_config();
  t["model_type"] = "llama";
  EXPECT_EQ(error_of([&] { parse_config(t.dump(), "config.json"); }),
            "config.json: unsupported architecture llama (model_type 'llama'); expected qwen3_5_moe or qwen3_5_moe_text");
  t = flat_text_config();
  t.erase("num_experts");
  EXPECT_EQ(error_of([&] { parse_config(t.dump(), "config.json"); }), "config.json: field 'num_experts': required, not found");
  json top = {{"model_type", "qwen3_5_moe"}, {"text_config", t}};
  EXPECT_EQ(error_of([&] { parse_config(top.dump(), "c.json"); }),
            "c.json: field 'text_config.num_experts': required, not found");
  t = flat_text_config();
  t.erase("full_attention_interval");
  EXPECT_TRUE(contains(error_of([&] { parse_config(t.dump(), "config.json"); }), "field 'layer_types': required"));
  t["layer_types"] = json::array({"linear_attention", "full_attention"});
  EXPECT_TRUE(contains(error_of([&] { parse_config(t.dump(), "config.json"); }),
                       "field 'layer_types': expected a list of 8 strings, found a list of 2"));
  t = flat_text_config();
  t["hidden_size"] = "2048";
  EXPECT_EQ(error_of([&] { parse_config(t.dump(), "config.json"); }),
            "config.json: field 'hidden_size': expected an integer, found a JSON string");
  t = flat_text_config();
  t["num_key_value_heads"] = 3;
  EXPECT_TRUE(contains(error_of([&] { parse_config(t.dump(), "config.json"); }), "multiple of num_key_value_heads"));
  t = flat_text_config();
  t.erase("rope_theta");
  EXPECT_TRUE(contains(error_of([&] { parse_config(t.dump(), "config.json"); }), "rope_theta"));
  t = flat_text_config();
  t["eos_token_id"] = "x";
  EXPECT_TRUE(contains(error_of([&] { parse_config(t.dump(), "config.json"); }), "field 'eos_token_id'"));
  EXPECT_TRUE(contains(error_of([&] { parse_config("{", "config.json"); }), "config.json: not valid JSON"));
  EXPECT_TRUE(contains(error_of([&] { parse_config("{}", "config.json"); }), "field 'model_type'"));
}

TEST(QuantConfig, PerModuleOverrides) {
  const std::string p = tiny("model-mlx-4bit/config.json");
  QuantConfig q = QuantConfig::parse(read_text(p), p);
  ASSERT_TRUE(q.present());
  QuantSpec base = q.resolve("language_model.model.layers.0.linear_attn.in_proj_qkv");
  EXPECT_TRUE(base.quantized);
  EXPECT_EQ(base.bits, 4);
  EXPECT_EQ(base.group, 64);
  QuantSpec router = q.resolve("language_model.model.layers.2.mlp.gate");
  EXPECT_EQ(router.bits, 8);
  EXPECT_TRUE(contains(router.source, "quantization['language_model.model.layers.2.mlp.gate']"));
  EXPECT_EQ(q.resolve("language_model.model.layers.3.mlp.shared_expert_gate").bits, 8);
  EXPECT_FALSE(QuantConfig::parse(read_text(tiny("model-bf16/config.json")), "c").present());

  EXPECT_EQ(error_of([] { QuantConfig::parse(R"({"quantization":{"bits":4,"group_size":64,"mode":"mxfp4"}})", "c.json"); }),
            "c.json: unsupported quantisation mode \"mxfp4\" in quantization; expected \"affine\" (MLX's mxfp4, nvfp4 "
            "and mxfp8 modes are not supported)");
  EXPECT_TRUE(contains(error_of([] {
                         QuantConfig::parse(R"({"quantization":{"bits":4,"group_size":64,"m.x":{"bits":4,"mode":"nvfp4"}}})",
                                            "c.json");
                       }),
                       "unsupported quantisation mode \"nvfp4\" in quantization['m.x']"));
  EXPECT_TRUE(contains(error_of([] { QuantConfig::parse(R"({"quantization_config":{"quant_method":"fp8"}})", "c.json"); }),
                       "c.json quantization_config: unsupported quantisation: fp8 weight_block_size absent"));
  EXPECT_TRUE(contains(error_of([] { QuantConfig::parse(R"({"quantization_config":{"quant_method":"hqq"}})", "c.json"); }),
                       "unsupported quantisation method \"hqq\" (quant_method)"));
  EXPECT_TRUE(contains(error_of([] { QuantConfig::parse(R"({"quantization":{"bits":7,"group_size":64}})", "c.json"); }),
                       "expected bits 2, 3, 4, 5, 6 or 8, found 7"));
  for (int bits : {2, 3, 5, 6})
    EXPECT_EQ(QuantConfig::parse(R"({"quantization":{"bits":)" + std::to_string(bits) + R"(,"group_size":128}})", "c")
                  .resolve("x")
                  .bits,
              bits);
  const QuantConfig fp8 = QuantConfig::parse(
      R"({"quantization_config":{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128],"activation_scheme":"dynamic"}})", "c");
  EXPECT_EQ(fp8.method(), QuantMethod::Fp8);
  EXPECT_EQ(fp8.hf().fp8_block, 128);
  EXPECT_FALSE(fp8.present());
  QuantConfig off = QuantConfig::parse(R"({"quantization":{"bits":8,"group_size":32,"a.b":false,"c":{"bits":4}}})", "c");
  EXPECT_FALSE(off.resolve("a.b").quantized);
  EXPECT_EQ(off.resolve("c").bits, 4);
  EXPECT_EQ(off.resolve("c").group, 32);  // inherits the base group
}
