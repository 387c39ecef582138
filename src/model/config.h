// Text-model hyper-parameters of qwen3_5_moe, read from config.json (nested text_config accepted).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lily {

struct ModelConfig {
  std::string model_type;        // "qwen3_5_moe" or "qwen3_5_moe_text"
  int hidden = 0;                // H (2048)
  int n_layers = 0;              // 40
  std::vector<bool> is_full;     // [n_layers]: true = gated full attention, false = Gated DeltaNet
  int vocab = 0;                 // embedding / lm_head rows (248320)
  float rms_eps = 1e-6f;
  // gated full attention
  int n_q_heads = 0;             // 16
  int n_kv_heads = 0;            // 2
  int head_dim = 0;              // 256
  int rope_dim = 0;              // head_dim * partial_rotary_factor (64)
  double rope_theta = 1e7;
  // Gated DeltaNet
  int lin_k_heads = 0;           // Hk (16)
  int lin_v_heads = 0;           // Hv (32)
  int lin_k_dim = 0;             // Dk (128)
  int lin_v_dim = 0;             // Dv (128)
  int conv_kernel = 0;           // K (4)
  // MoE
  int n_experts = 0;             // 256
  int top_k = 0;                 // 8
  int expert_inter = 0;          // I (512)
  int shared_inter = 0;          // 512
  int max_pos = 0;               // max_position_embeddings
  bool tie_embeddings = false;   // tie_word_embeddings: lm_head shares embed_tokens when no lm_head tensor
  std::vector<int> eos_ids;      // stop ids known from config / generation_config

  int key_dim() const { return lin_k_heads * lin_k_dim; }            // 2048
  int value_dim() const { return lin_v_heads * lin_v_dim; }          // 4096
  int conv_dim() const { return 2 * key_dim() + value_dim(); }       // 8192
  int q_proj_rows() const { return 2 * n_q_heads * head_dim; }       // 8192 (query|gate per head)
  int kv_dim() const { return n_kv_heads * head_dim; }               // 512
  int n_full_layers() const;
};

// Parses config.json text (throws lily::Error naming `path` and the field on any problem).
ModelConfig parse_config(const std::string& json_text, const std::string& path);

// Adds generation_config.json's eos_token_id (int or list) to cfg->eos_ids (throws lily::Error naming `path`).
void merge_generation_config(const std::string& json_text, const std::string& path, ModelConfig* cfg);

}  // namespace lily
