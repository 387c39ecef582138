#include "model/quant_config.h"

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
                "; expected \"affine\"");
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
  if (s.bits != 2 && s.bits != 4 && s.bits != 8)
    throw Error(path + ": " + where + ": expected bits 2, 4 or 8, found " + std::to_string(s.bits));
  if (s.group != 32 && s.group != 64 && s.group != 128)
    throw Error(path + ": " + where + ": expected group_size 32, 64 or 128, found " + std::to_string(s.group));
  return s;
}

}  // namespace

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
    if (it == top.end() || it->is_null()) return qc;
    if (it->is_object() && it->contains("quant_method"))
      throw Error(path + ": unsupported quantisation mode " + (*it)["quant_method"].dump() +
                  " (quantization_config.quant_method); expected MLX \"affine\"");
  }
  const json& q = *it;
  if (!q.is_object()) throw Error(path + ": field '" + key + "': expected an object, found " + q.dump());
  check_mode(q, path, key);
  qc.present_ = true;
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
