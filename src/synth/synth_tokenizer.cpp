#include "synth/synth_tokenizer.h"

#include "core/error.h"

namespace lily {

namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s.push_back(char(cp));
  } else if (cp < 0x800) {
    s.push_back(char(0xC0 | (cp >> 6)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(char(0xE0 | (cp >> 12)));
    s.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(char(0x80 | (cp & 0x3F)));
  }
  return s;
}

// GPT-2 byte-to-unicode: printable bytes map to themselves, the rest to U+0100 upwards; listed in that order.
std::vector<std::string> byte_symbols() {
  std::vector<std::string> out;
  std::vector<bool> direct(256, false);
  for (int b = 0; b < 256; ++b) direct[size_t(b)] = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
  for (int b = 0; b < 256; ++b)
    if (direct[size_t(b)]) out.push_back(utf8(uint32_t(b)));
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b)
    if (!direct[size_t(b)]) out.push_back(utf8(next++));
  return out;
}

}  // namespace

std::vector<std::pair<std::string, bool>> qwen35_added_tokens(int n) {
  static const std::vector<std::pair<std::string, bool>> all = {
      {"<|endoftext|>", true},      {"<|im_start|>", true},       {"<|im_end|>", true},
      {"<|object_ref_start|>", true}, {"<|object_ref_end|>", true}, {"<|box_start|>", true},
      {"<|box_end|>", true},        {"<|quad_start|>", true},     {"<|quad_end|>", true},
      {"<|vision_start|>", true},   {"<|vision_end|>", true},     {"<|vision_pad|>", true},
      {"<|image_pad|>", true},      {"<|video_pad|>", true},      {"<tool_call>", false},
      {"</tool_call>", false},      {"<|fim_prefix|>", false},    {"<|fim_middle|>", false},
      {"<|fim_suffix|>", false},    {"<|fim_pad|>", false},       {"<|repo_name|>", false},
      {"<|file_sep|>", false},      {"<tool_response>", false},   {"</tool_response>", false},
      {"<think>", false},           {"</think>", false},          {"<|audio_start|>", true},
      {"<|audio_end|>", true},      {"<tts_pad>", true},          {"<tts_text_bos>", true},
      {"<tts_text_eod>", true},     {"<tts_text_bos_single>", true}, {"<|audio_pad|>", true},
  };
  if (n < 0 || size_t(n) > all.size()) throw Error("qwen35_added_tokens: at most 33 added tokens exist");
  return {all.begin(), all.begin() + n};
}

nlohmann::json make_synthetic_tokenizer(int bpe_vocab, int n_added) {
  if (bpe_vocab < 256) throw Error("synthetic tokenizer: a byte-level vocabulary needs at least 256 tokens");
  using J = nlohmann::json;  // std::map objects: ordered_json inserts in linear time
  J vocab = J::object();
  J merges = J::array();
  auto syms = byte_symbols();
  for (size_t i = 0; i < syms.size(); ++i) vocab[syms[i]] = int(i);
  int id = 256;
  const std::string space = utf8(0x120);  // 'Ġ', the byte-level symbol of ' '
  std::vector<std::string> letters;
  for (char c = 'a'; c <= 'z'; ++c) letters.emplace_back(1, c);
  std::vector<std::string> level = {space};
  level.insert(level.end(), letters.begin(), letters.end());
  while (id < bpe_vocab) {
    std::vector<std::string> next_level;
    for (const auto& left : level) {
      for (const auto& right : letters) {
        if (id >= bpe_vocab) break;
        std::string tok = left + right;
        vocab[tok] = id++;
        merges.push_back(J::array({left, right}));
        next_level.push_back(std::move(tok));
      }
      if (id >= bpe_vocab) break;
    }
    level = std::move(next_level);
  }
  J added = J::array();
  auto names = qwen35_added_tokens(n_added);
  for (size_t i = 0; i < names.size(); ++i)
    added.push_back({{"id", bpe_vocab + int(i)}, {"content", names[i].first}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false}, {"special", names[i].second}});
  const char* regex =
      "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
      "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  J tok;
  tok["version"] = "1.0";
  tok["truncation"] = nullptr;
  tok["padding"] = nullptr;
  tok["added_tokens"] = added;
  tok["normalizer"] = {{"type", "NFC"}};
  tok["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       J::array({J{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                 J{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}})}};
  tok["post_processor"] = nullptr;
  tok["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  tok["model"] = {{"type", "BPE"},          {"dropout", nullptr},          {"unk_token", nullptr},
                  {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                  {"byte_fallback", false}, {"ignore_merges", false},      {"vocab", vocab},
                  {"merges", merges}};
  return tok;
}

}  // namespace lily
