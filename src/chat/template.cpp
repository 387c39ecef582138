// ChatTemplate: locating a model's template and rendering it (see template.h).
#include "chat/template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/jinja/ast.h"
#include "chat/jinja/eval.h"
#include "core/error.h"
#include "io/text_file.h"

namespace lily {

namespace {

std::string read_file(const std::filesystem::path& p) {
  return read_text_file(p.string());
}

nlohmann::ordered_json read_json(const std::filesystem::path& p) {
  try {
    return nlohmann::ordered_json::parse(read_file(p));
  } catch (const nlohmann::json::exception& e) {
    throw Error(p.string() + ": invalid JSON: " + e.what());
  }
}

// A special token in tokenizer_config.json: a string, or an AddedToken object {"content": ...}.
std::optional<std::string> token_text(const nlohmann::ordered_json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return std::nullopt;
}

std::string template_from_field(const nlohmann::ordered_json& field, const std::string& where) {
  if (field.is_string()) return field.get<std::string>();
  if (field.is_array()) {
    for (const auto& e : field)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
    throw Error(where + ": chat_template list has no entry named \"default\"");
  }
  throw Error(where + ": chat_template must be a string or a list of {name, template}");
}

}  // namespace

ChatTemplate ChatTemplate::from_string(const std::string& source) {
  ChatTemplate t;
  t.prog_ = jinja::parse_template(source);
  t.source_ = source;
  return t;
}

ChatTemplate ChatTemplate::load_for_model(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  fs::path cfg_path = dir / "tokenizer_config.json";
  nlohmann::ordered_json cfg;
  if (fs::exists(cfg_path)) cfg = read_json(cfg_path);
  std::string source;
  bool found = false;
  if (fs::exists(dir / "chat_template.jinja")) {
    source = read_file(dir / "chat_template.jinja");
    found = true;
  } else if (fs::exists(dir / "chat_template.json")) {
    auto j = read_json(dir / "chat_template.json");
    if (!j.is_object() || !j.contains("chat_template")) throw Error((dir / "chat_template.json").string() + ": no \"chat_template\" key");
    source = template_from_field(j["chat_template"], (dir / "chat_template.json").string());
    found = true;
  } else if (cfg.is_object() && cfg.contains("chat_template")) {
    source = template_from_field(cfg["chat_template"], cfg_path.string());
    found = true;
  }
  if (!found)
    throw Error(model_dir + ": no chat template (looked for chat_template.jinja, chat_template.json and "
                            "tokenizer_config.json \"chat_template\")");
  ChatTemplate t;
  try {
    t = from_string(source);
  } catch (const Error& e) {
    throw Error(model_dir + ": chat template: " + e.what());
  }
  if (cfg.is_object()) {
    t.bos_token_ = token_text(cfg, "bos_token");
    t.eos_token_ = token_text(cfg, "eos_token");
  }
  return t;
}

std::string ChatTemplate::render(const nlohmann::ordered_json& ctx) const {
  if (!prog_) throw Error("chat template not loaded");
  if (!ctx.is_object()) throw Error("chat template context must be a JSON object");
  jinja::Dict globals;
  jinja::add_builtin_globals(globals);
  if (bos_token_) globals.set("bos_token", jinja::Value::string(*bos_token_));
  if (eos_token_) globals.set("eos_token", jinja::Value::string(*eos_token_));
  for (auto it = ctx.begin(); it != ctx.end(); ++it) globals.set(it.key(), jinja::Value::from_json(it.value()));
  jinja::Interpreter in(prog_);
  return in.render(globals);
}

}  // namespace lily
