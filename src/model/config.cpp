// parse_config: config.json (top-level or nested text_config) -> ModelConfig, with every field checked.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lily {

using nlohmann::json;

int ModelConfig::n_full_layers() const { return int(std::count(is_full.begin(), is_full.end(), true)); }

namespace {

struct Reader {
  const json& text;  // text_config, or the top level when there is none
  const json& top;
  std::string path;
  std::string where;  // "text_config." or ""

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(path + ": field '" + where + field + "': " + what);
  }
  const json* find(const std::string& field) const {
    auto it = text.find(field);
    if (it != text.end() && !it->is_null()) return &*it;
    return nullptr;
  }
  int integer(const std::string& field, int lo, int hi) const {
    const json* v = find(field);
    if (!v) fail(field, "required, not found");
    return checked_int(*v, field, lo, hi);
  }
  int integer_or(const std::string& field, int lo, int hi, int dflt) const {
    const json* v = find(field);
    return v ? checked_int(*v, field, lo, hi) : dflt;
  }
  int checked_int(const json& v, const std::string& field, int lo, int hi) const {
    if (!v.is_number_integer()) fail(field, std::string("expected an integer, found a JSON ") + v.type_name());
    int64_t x = v.get<int64_t>();
    if (x < lo || x > hi)
      fail(field, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                      std::to_string(x));
    return int(x);
  }
  double number(const json& v, const std::string& field, double lo, double hi) const {
    if (!v.is_number()) fail(field, std::string("expected a number, found a JSON ") + v.type_name());
    double x = v.get<double>();
    if (!(x >= lo && x <= hi))
      fail(field, "expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], found " +
                      std::to_string(x));
    return x;
  }
  // rope_parameters.<field> first, then the text config's own <field>.
  const json* rope_field(const std::string& field) const {
    for (const char* rp : {"rope_parameters", "rope_scaling"}) {
      const json* r = find(rp);
      if (r && r->is_object()) {
        auto it = r->find(field);
        if (it != r->end() && !it->is_null()) return &*it;
      }
    }
    return find(field);
  }
};

bool is_supported_type(const std::string& t) { return t == "qwen3_5_moe" || t == "qwen3_5_moe_text"; }

void read_eos(const json& v, const std::string& path, std::vector<int>* out) {
  auto add = [&](const json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > (int64_t(1) << 30))
      throw Error(path + ": field 'eos_token_id': expected a non-negative integer or a list of them, found " + x.dump());
    int id = int(x.get<int64_t>());
    if (std::find(out->begin(), out->end(), id) == out->end()) out->push_back(id);
  };
  if (v.is_null()) return;
  if (v.is_array()) {
    for (const json& x : v) add(x);
  } else {
    add(v);
  }
}

}  // namespace

ModelConfig parse_config(const std::string& json_text, const std::string& path) {
  json top;
  try {
    top = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  if (!top.is_object()) throw Error(path + ": expected a JSON object, found a JSON " + std::string(top.type_name()));
  auto mt = top.find("model_type");
  if (mt == top.end() || !mt->is_string()) throw Error(path + ": field 'model_type': required string, not found");
  ModelConfig c;
  c.model_type = mt->get<std::string>();
  if (!is_supported_type(c.model_type))
    throw Error(path + ": unsupported architecture " + c.model_type + " (model_type '" + c.model_type +
                "'); expected qwen3_5_moe or qwen3_5_moe_text");

  const bool nested = top.contains("text_config") && !top["text_config"].is_null();
  if (nested && !top["text_config"].is_object())
    throw Error(path + ": field 'text_config': expected an object, found a JSON " +
                std::string(top["text_config"].type_name()));
  Reader r{nested ? top["text_config"] : top, top, path, nested ? "text_config." : ""};
  if (nested) {
    const json* tmt = r.find("model_type");
    if (tmt && (!tmt->is_string() || !is_supported_type(tmt->get<std::string>())))
      throw Error(path + ": unsupported architecture " + tmt->dump() + " (text_config.model_type); expected qwen3_5_moe_text");
  }

  constexpr int kDim = 1 << 20, kHeads = 4096, kHeadDim = 4096;
  c.hidden = r.integer("hidden_size", 1, kDim);
  c.n_layers = r.integer("num_hidden_layers", 1, 4096);
  c.vocab = r.integer("vocab_size", 1, 1 << 24);
  c.n_q_heads = r.integer("num_attention_heads", 1, kHeads);
  c.n_kv_heads = r.integer("num_key_value_heads", 1, kHeads);
  c.head_dim = r.integer("head_dim", 1, kHeadDim);
  c.lin_k_heads = r.integer("linear_num_key_heads", 1, kHeads);
  c.lin_v_heads = r.integer("linear_num_value_heads", 1, kHeads);
  c.lin_k_dim = r.integer("linear_key_head_dim", 1, kHeadDim);
  c.lin_v_dim = r.integer("linear_value_head_dim", 1, kHeadDim);
  c.conv_kernel = r.integer("linear_conv_kernel_dim", 1, 64);
  c.n_experts = r.integer("num_experts", 1, 1 << 16);
  c.top_k = r.integer("num_experts_per_tok", 1, c.n_experts);
  c.expert_inter = r.integer("moe_intermediate_size", 1, kDim);
  c.shared_inter = r.integer("shared_expert_intermediate_size", 1, kDim);
  c.max_pos = r.integer_or("max_position_embeddings", 1, 1 << 30, 262144);
  if (c.n_q_heads % c.n_kv_heads != 0)
    r.fail("num_attention_heads", "expected a multiple of num_key_value_heads (" + std::to_string(c.n_kv_heads) +
                                      "), found " + std::to_string(c.n_q_heads));
  if (c.lin_v_heads % c.lin_k_heads != 0)
    r.fail("linear_num_value_heads", "expected a multiple of linear_num_key_heads (" +
                                         std::to_string(c.lin_k_heads) + "), found " + std::to_string(c.lin_v_heads));
  if (const json* e = r.find("rms_norm_eps")) c.rms_eps = float(r.number(*e, "rms_norm_eps", 0.0, 1.0));

  const json* theta = r.rope_field("rope_theta");
  if (!theta) r.fail("rope_parameters.rope_theta", "required (or a top-level rope_theta), not found");
  c.rope_theta = r.number(*theta, "rope_theta", 1.0, 1e12);
  const json* prf = r.rope_field("partial_rotary_factor");
  if (!prf) r.fail("rope_parameters.partial_rotary_factor", "required (or a top-level partial_rotary_factor), not found");
  double f = r.number(*prf, "partial_rotary_factor", 0.0, 1.0);
  double rd = f * c.head_dim;
  c.rope_dim = int(std::lround(rd));
  if (std::fabs(rd - c.rope_dim) > 1e-6 || c.rope_dim % 2 != 0 || c.rope_dim <= 0)
    r.fail("partial_rotary_factor", "expected head_dim * factor to be a positive even integer, found " +
                                        std::to_string(rd));

  if (const json* lt = r.find("layer_types")) {
    if (!lt->is_array() || int(lt->size()) != c.n_layers)
      r.fail("layer_types", "expected a list of " + std::to_string(c.n_layers) + " strings, found " +
                                (lt->is_array() ? "a list of " + std::to_string(lt->size()) : std::string(lt->type_name())));
    for (const json& t : *lt) {
      if (t == "full_attention") c.is_full.push_back(true);
      else if (t == "linear_attention") c.is_full.push_back(false);
      else r.fail("layer_types", "expected 'full_attention' or 'linear_attention', found " + t.dump());
    }
  } else if (r.find("full_attention_interval")) {
    int iv = r.integer("full_attention_interval", 1, c.n_layers);
    for (int i = 0; i < c.n_layers; ++i) c.is_full.push_back((i + 1) % iv == 0);
  } else {
    r.fail("layer_types", "required (or full_attention_interval), not found");
  }

  auto tie = r.find("tie_word_embeddings");
  if (!tie) {
    auto t2 = top.find("tie_word_embeddings");
    if (t2 != top.end() && !t2->is_null()) tie = &*t2;
  }
  if (tie) {
    if (!tie->is_boolean()) r.fail("tie_word_embeddings", std::string("expected a boolean, found a JSON ") + tie->type_name());
    c.tie_embeddings = tie->get<bool>();
  }

  if (const json* e = r.find("eos_token_id")) read_eos(*e, path, &c.eos_ids);
  else if (nested && top.contains("eos_token_id")) read_eos(top["eos_token_id"], path, &c.eos_ids);
  return c;
}

void merge_generation_config(const std::string& json_text, const std::string& path, ModelConfig* cfg) {
  json g;
  try {
    g = json::parse(json_text);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  if (!g.is_object()) throw Error(path + ": expected a JSON object, found a JSON " + std::string(g.type_name()));
  auto it = g.find("eos_token_id");
  if (it != g.end()) read_eos(*it, path, &cfg->eos_ids);
}

}  // namespace lily
