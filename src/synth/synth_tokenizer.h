// A valid byte-level BPE tokenizer.json of any vocabulary size for synthetic checkpoints.
//
// It is not the Qwen3.5 vocabulary (which cannot be generated): ids 0..255 are the 256 byte symbols in
// GPT-2 byte-to-unicode order; ids 256..bpe_vocab-1 are merges built level by level over lowercase letters
// ("Ġa".."zz", then each of those plus a letter, ...), so every merge's parts exist before it. It keeps what
// the engine relies on: the Qwen3.5 pre-tokenizer regex, NFC normaliser, ByteLevel pre-tokenizer/decoder, and
// the Qwen3.5 added tokens (<|endoftext|>, <|im_start|>, ..., <think>, ...) at ids bpe_vocab + 0, 1, 2, ...
// (for the full preset: 248044 = <|endoftext|>, 248045 = <|im_start|>, 248046 = <|im_end|>, ...).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lily {

// The Qwen3.5 added tokens in id order; `n` selects how many (26 for the fixtures' tokenizers, 33 for the real
// vocabulary, which adds the audio/tts tokens).
std::vector<std::pair<std::string, bool>> qwen35_added_tokens(int n);

nlohmann::json make_synthetic_tokenizer(int bpe_vocab, int n_added);

}  // namespace lily
