// Tokenizer / chat template of a model directory or GGUF file.
#include "cli/model_assets.h"

#include "core/error.h"
#include "io/gguf.h"
#include "model/gguf_weights.h"
#include "tokenizer/gguf_tokenizer.h"

namespace lily {

std::shared_ptr<Tokenizer> load_model_tokenizer(const std::string& model) {
  if (!is_gguf_path(model)) return Tokenizer::load(model + "/tokenizer.json");
  return gguf_tokenizer(GgufModel(model));
}

ChatTemplate load_model_template(const std::string& model) {
  if (!is_gguf_path(model)) return ChatTemplate::load_for_model(model);
  const std::string t = gguf_chat_template(GgufModel(model));
  if (t.empty()) throw Error(model + ": the file has no chat template (metadata key 'tokenizer.chat_template')");
  return ChatTemplate::from_string(t);
}

}  // namespace lily
