// The tokenizer and chat template of `--model PATH`: from the metadata of a GGUF file (PATH ending in .gguf,
// split parts included), else from the checkpoint directory's tokenizer.json and template files.
#pragma once
#include <memory>
#include <string>

#include "chat/template.h"
#include "tokenizer/tokenizer.h"

namespace lily {

std::shared_ptr<Tokenizer> load_model_tokenizer(const std::string& model);
ChatTemplate load_model_template(const std::string& model);  // throws lily::Error when the model has none

}  // namespace lily
