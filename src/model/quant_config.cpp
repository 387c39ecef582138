#include "model/quant_config.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lily {

using nlohmann::json;

namespace {

void check_mode(const json& q, const std::string& path, const std::string& where) {
  auto m = q.find("mode");
  if (m == q.end() || m->is_null()) return;  // older MLX configs: affine implied
  if (!m->is_string() || m->get<std::string>() != "affine")
    throw Error(path + ": unsupported quantisation mode " + m->dump() + " in " + where +
                "; expected \"affine\" (MLX's mxfp4, nvfp4 and mxfp8 modes are not supported)");
}

QuantSpec read_spec(const json& q, const QuantSpec* base, const std::string& path, const std::string& where) {
  QuantSpec s;
  s.quantized = true;
  s.source = path + " " + where;
  auto get = [&](const char* key, int dflt) {
    auto it = q.find(key);
    if (it == q.end() || it->is_null()) {
      if (dflt > 0) return dflt;
      throw Error(path + ": " + where + ": field '" + key + "' required, not found");
    }
    if (!it->is_number_integer())
      throw Error(path + ": " + where + ": field '" + key + "': expected an integer, found " + it->dump());
    return int(std::max<int64_t>(-1, std::min<int64_t>(it->get<int64_t>(), 1 << 20)));
  };
  s.bits = get("bits", base ? base->bits : 0);
  s.group = get("group_size", base ? base->group : 64);
  if (s.bits < 2 || s.bits > 8 || s.bits == 7)
    throw Error(path + ": " + where + ": expected bits 2, 3, 4, 5, 6 or 8, found " + std::to_string(s.bits));
  if (s.group != 32 && s.group != 64 && s.group != 128)
    throw Error(path + ": " + where + ": expected group_size 32, 64 or 128, found " + std::to_string(s.group));
  return s;
}

}  // namespace

namespace {

int int_field(const json& q, const char* key, int dflt, const std::string& where) {
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return dflt;
  if (!it->is_number_integer())
    throw Error(where + ": field '" + key + "': expected an integer, found " + it->dump());
  return int(std::max<int64_t>(-2, std::min<int64_t>(it->get<int64_t>(), 1 << 20)));
}

bool bool_field(const json& q, const char* key, bool dflt, const std::string& where) {
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return dflt;
  if (!it->is_boolean()) throw Error(where + ": field '" + key + "': expected true or false, found " + it->dump());
  return it->get<bool>();
}

std::string str_field(const json& q, const char* key, const std::string& dflt, const std::string& where) {
  auto it = q.find(key);
  if (it == q.end() || it->is_null()) return dflt;
  if (!it->is_string()) throw Error(where + ": field '" + key + "': expected a string, found " + it->dump());
  return it->get<std::string>();
}

void check_int4_group(const HfQuant& h, const std::string& where) {
  if (h.bits != 4)
    throw Error(where + ": unsupported quantisation: " + std::to_string(h.bits) + "-bit weights; expected 4");
  if (h.group != -1 && (h.group <= 0 || h.group % 64 != 0))
    throw Error(where + ": unsupported quantisation: group_size " + std::to_string(h.group) +
                "; expected a multiple of 64 (e.g. 128) or -1");
}

// A Hugging Face quantization_config with a quant_method.
void parse_hf(const json& q, const std::string& where, QuantMethod* method, HfQuant* h) {
  const json& m = q["quant_method"];
  const std::string name = m.is_string() ? m.get<std::string>() : m.dump();
  if (name == "fp8") {
    *method = QuantMethod::Fp8;
    const std::string fmt = str_field(q, "fmt", "e4m3", where);
    if (fmt != "e4m3")
      throw Error(where + ": unsupported quantisation: fp8 fmt \"" + fmt + "\"; expected \"e4m3\"");
    auto bs = q.find("weight_block_size");
    if (bs == q.end() || !bs->is_array() || bs->size() != 2 || !(*bs)[0].is_number_integer() ||
        (*bs)[0] != (*bs)[1] || (*bs)[0].get<int64_t>() <= 0 || (*bs)[0].get<int64_t>() > 4096)
      throw Error(where + ": unsupported quantisation: fp8 weight_block_size " +
                  (bs == q.end() ? std::string("absent") : bs->dump()) +
                  "; expected a square block such as [128, 128] (per-tensor FP8 is not supported)");
    h->fp8_block = int((*bs)[0].get<int64_t>());
    const std::string act = str_field(q, "activation_scheme", "dynamic", where);
    if (act != "dynamic")
      throw Error(where + ": unsupported quantisation: fp8 activation_scheme \"" + act + "\"; expected \"dynamic\"");
  } else if (name == "gptq") {
    *method = QuantMethod::Gptq;
    h->bits = int_field(q, "bits", 4, where);
    h->group = int_field(q, "group_size", 128, where);
    h->desc_act = bool_field(q, "desc_act", false, where);
    h->sym = bool_field(q, "sym", true, where);
    const std::string cf = str_field(q, "checkpoint_format", "gptq", where);
    if (cf != "gptq" && cf != "gptq_v2")
      throw Error(where + ": unsupported quantisation: gptq checkpoint_format \"" + cf + "\"; expected \"gptq\" or \"gptq_v2\"");
    h->gptq_v2 = cf == "gptq_v2";
    check_int4_group(*h, where);
  } else if (name == "awq") {
    *method = QuantMethod::Awq;
    h->bits = int_field(q, "bits", int_field(q, "w_bit", 4, where), where);
    h->group = int_field(q, "group_size", int_field(q, "q_group_size", 128, where), where);
    h->sym = !bool_field(q, "zero_point", true, where);
    const std::string v = str_field(q, "version", "gemm", where);
    if (v != "gemm" && v != "GEMM")
      throw Error(where + ": unsupported quantisation: awq version \"" + v + "\"; expected \"gemm\"");
    check_int4_group(*h, where);
  } else if (name == "compressed-tensors") {
    *method = QuantMethod::CompressedTensors;
    const std::string fmt = str_field(q, "format", "", where);
    if (fmt != "pack-quantized")
      throw Error(where + ": unsupported quantisation: compressed-tensors format \"" + fmt + "\"; expected \"pack-quantized\"");
    auto cg = q.find("config_groups");
    if (cg == q.end() || !cg->is_object() || cg->size() != 1)
      throw Error(where + ": compressed-tensors: expected one entry in 'config_groups', found " +
                  (cg == q.end() ? std::string("none") : std::to_string(cg->size())));
    const json& g = cg->begin().value();
    auto wq = g.find("weights");
    if (!g.is_object() || wq == g.end() || !wq->is_object())
      throw Error(where + ": compressed-tensors: config_groups['" + cg->begin().key() + "']: expected a 'weights' object");
    const std::string gw = where + " config_groups['" + cg->begin().key() + "'].weights";
    const std::string type = str_field(*wq, "type", "int", gw);
    if (type != "int") throw Error(gw + ": unsupported quantisation: type \"" + type + "\"; expected \"int\"");
    h->bits = int_field(*wq, "num_bits", 4, gw);
    const std::string strat = str_field(*wq, "strategy", "group", gw);
    if (strat != "group" && strat != "channel")
      throw Error(gw + ": unsupported quantisation: strategy \"" + strat + "\"; expected \"group\" or \"channel\"");
    h->group = strat == "channel" ? -1 : int_field(*wq, "group_size", 128, gw);
    h->sym = bool_field(*wq, "symmetric", true, gw);
    if (bool_field(*wq, "actorder", false, gw) || (wq->contains("actorder") && (*wq)["actorder"].is_string()))
      throw Error(gw + ": unsupported quantisation: actorder (act-order groups are not supported)");
    check_int4_group(*h, gw);
  } else {
    throw Error(where + ": unsupported quantisation method " + m.dump() +
                " (quant_method); expected \"fp8\", \"gptq\", \"awq\" or \"compressed-tensors\", or MLX affine");
  }
}

}  // namespace

const char* quant_method_name(QuantMethod m) {
  switch (m) {
    case QuantMethod::None: return "none";
    case QuantMethod::MlxAffine: return "mlx affine";
    case QuantMethod::Fp8: return "fp8";
    case QuantMethod::Gptq: return "gptq";
    case QuantMethod::Awq: return "awq";
    case QuantMethod::CompressedTensors: return "compressed-tensors";
  }
  return "?";
}

QuantConfig QuantConfig::parse(const std::string& text, const std::string& path) {
  json top;
  try {
    top = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
  QuantConfig qc;
  qc.path_ = path;
  if (!top.is_object()) return qc;
  const char* key = "quantization";
  auto it = top.find(key);
  if (it == top.end() || it->is_null()) {
    key = "quantization_config";
    it = top.find(key);
    if (it == top.end() || it->is_null()) {  // text_config may carry it (some conversions nest it)
      auto tc = top.find("text_config");
      if (tc == top.end() || !tc->is_object()) return qc;
      it = tc->find(key);
      if (it == tc->end() || it->is_null()) return qc;
    }
    qc.source_ = path + " " + key;
    if (it->is_object() && it->contains("quant_method")) {
      parse_hf(*it, qc.source_, &qc.method_, &qc.hf_);
      return qc;
    }
  }
  const json& q = *it;
  qc.source_ = path + " " + key;
  if (!q.is_object()) throw Error(path + ": field '" + key + "': expected an object, found " + q.dump());
  check_mode(q, path, key);
  qc.method_ = QuantMethod::MlxAffine;
  qc.base_ = read_spec(q, nullptr, path, key);
  for (auto e = q.begin(); e != q.end(); ++e) {
    const std::string where = std::string(key) + "['" + e.key() + "']";
    if (e.value().is_object()) {
      check_mode(e.value(), path, where);
      qc.overrides_[e.key()] = read_spec(e.value(), &qc.base_, path, where);
    } else if (e.value().is_boolean()) {
      QuantSpec s = e.value().get<bool>() ? qc.base_ : QuantSpec{};
      s.source = path + " " + where;
      qc.overrides_[e.key()] = s;
    }
  }
  return qc;
}

QuantSpec QuantConfig::resolve(const std::string& module) const {
  auto it = overrides_.find(module);
  if (it != overrides_.end()) return it->second;
  return base_;
}

}  // namespace lily
