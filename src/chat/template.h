// A model's chat template, rendered by lily's own Jinja engine (src/chat/jinja) with the settings transformers
// uses (trim_blocks, lstrip_blocks, loop controls, tojson = json.dumps(ensure_ascii=False), raise_exception,
// strftime_now). Template errors are lily::Error naming line and column; raise_exception gives its message.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace lily {

namespace jinja {
struct Program;
}

class ChatTemplate {
 public:
  static ChatTemplate from_string(const std::string& source);  // parse; throws lily::Error
  // Finds the template of a model directory: chat_template.jinja, or chat_template.json {"chat_template": ...},
  // or tokenizer_config.json "chat_template" (string, or list of {name, template}: take "default"). Throws if
  // none. bos_token / eos_token come from tokenizer_config.json when present.
  static ChatTemplate load_for_model(const std::string& model_dir);
  // ctx: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool, ...extra keywords}. Keys of ctx
  // override bos_token / eos_token from the model directory.
  std::string render(const nlohmann::ordered_json& ctx) const;

  const std::string& source() const { return source_; }

 private:
  std::shared_ptr<const jinja::Program> prog_;
  std::string source_;
  std::optional<std::string> bos_token_, eos_token_;
};

}  // namespace lily
