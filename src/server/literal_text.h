// Special-token spellings typed inside a chat request ("<|im_start|>" in a user's message, a pasted
// document) stay text, as OpenAI's API treats them: before the template renders, each such spelling in
// the request's strings becomes a placeholder (U+E000, its index, U+E001; a U+E000 typed by the client is
// escaped the same way), so the template cannot mistake it for structure; after rendering, the
// placeholders are put back and their offsets returned, and Tokenizer::encode(text, offsets) encodes
// them as ordinary text while the template's own special tokens stay control tokens.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lily {

// Masks every string value inside `j` (object keys are left as they are). `literals` collects what each
// placeholder stands for.
void mask_special_text(nlohmann::ordered_json& j, const std::vector<std::string>& specials,
                       std::vector<std::string>& literals);
std::string mask_special_text(const std::string& s, const std::vector<std::string>& specials,
                              std::vector<std::string>& literals);

// Puts the literals back into rendered text; `offsets` gets the byte offset of each restored literal in
// the result (sorted).
std::string unmask_special_text(const std::string& rendered, const std::vector<std::string>& literals,
                                std::vector<size_t>& offsets);

}  // namespace lily
