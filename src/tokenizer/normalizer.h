// tokenizer.json "normalizer": null, one of NFC/NFD/NFKC/NFKD, or a Sequence of those, applied with ICU.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>


namespace lily {

class Normalizer {
 public:
  Normalizer() = default;
  // Builds from the JSON value of "normalizer"; throws lily::Error naming an unsupported type.
  static Normalizer from_json(const nlohmann::json& j);

  bool empty() const { return forms_.empty(); }
  // Normalizes well-formed UTF-8.
  std::string apply(std::string_view text) const;
  std::string describe() const;  // e.g. "NFC" or "none"

 private:
  std::vector<std::string> forms_;  // "NFC", "NFD", "NFKC", "NFKD" in order
};

}  // namespace lily
