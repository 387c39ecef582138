// Byte-level BPE model (HF `tokenizers` BPE without dropout, unk or byte fallback): a word's raw bytes start as
// one symbol per byte and the adjacent pair with the lowest merge rank is merged first (leftmost on ties) until
// no pair has a merge. Results are cached per word.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace lily {

class BpeModel {
 public:
  // Builds from tokenizer.json "model" (type BPE); throws lily::Error naming the bad entry.
  static BpeModel from_json(const nlohmann::json& model);

  BpeModel() = default;
  BpeModel(BpeModel&& o) noexcept;
  BpeModel& operator=(BpeModel&& o) noexcept;

  // Appends the ids of one pre-token (raw bytes).
  void encode_word(std::string_view bytes, std::vector<int32_t>& out) const;

  int32_t id_of_spelling(std::string_view spelled) const;  // vocab entry as spelled in tokenizer.json; -1 if none
  const std::string* bytes_of(int32_t id) const;            // raw bytes of a vocab id; nullptr if none
  int32_t max_id() const { return static_cast<int32_t>(id_bytes_.size()) - 1; }
  size_t merge_count() const { return merges_.size(); }

 private:
  struct Merge {
    int32_t rank;
    int32_t id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  void bpe(std::string_view bytes, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> by_spelling_;  // "Ġhello" -> id
  std::vector<std::string> id_bytes_;                      // id -> raw bytes
  std::vector<uint8_t> id_present_;                        // id -> 1 when in vocab
  int32_t byte_id_[256];                                   // single-byte token ids (-1: byte absent, dropped)
  std::unordered_map<uint64_t, Merge> merges_;             // (left id, right id) -> rank, merged id
  bool ignore_merges_ = false;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace lily
