// The tokenizer and chat template a GGUF file carries (tokenizer.ggml.* metadata, as llama.cpp's converter
// writes them for a byte-level BPE model), turned into the Hugging Face tokenizer.json lily's Tokenizer reads:
// tokens of type NORMAL (1) or BYTE (6) form the BPE vocabulary, CONTROL (3) tokens become special added
// tokens and USER_DEFINED (4) tokens non-special added tokens, UNUSED (5) padding entries are left out;
// merges "a b" become ["a", "b"]; the pre-tokenizer named by tokenizer.ggml.pre selects the split regex
// ("qwen35": Qwen3.5's, with NFC normalisation; "qwen2": Qwen2/3's).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace lily {

class GgufModel;
class GgufWriter;
class Tokenizer;

// The reverse, as llama.cpp's converter writes a byte-level BPE tokenizer.json: tokenizer.ggml.model "gpt2",
// tokenizer.ggml.pre `pre`, tokens by id (gaps filled with "[PADn]" of type UNUSED), token types (NORMAL,
// CONTROL for special added tokens, USER_DEFINED for the others) and merges "a b". With `vocab_size` (the
// model's, i.e. token_embd's rows) the list is padded with "[PADn]" UNUSED entries up to it, as the converter
// does: llama.cpp requires as many tokens as embedding rows. Throws on bad JSON.
void gguf_add_tokenizer(const std::string& tokenizer_json, GgufWriter& w, const std::string& pre = "qwen35",
                        int64_t vocab_size = 0);

// tokenizer.json text (throws lily::Error naming the file and key when the metadata is missing or unusable).
std::string gguf_tokenizer_json(const GgufModel& m);
std::shared_ptr<Tokenizer> gguf_tokenizer(const GgufModel& m);

// tokenizer.chat_template, or "" when the file has none.
std::string gguf_chat_template(const GgufModel& m);

}  // namespace lily
