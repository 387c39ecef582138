#include "tokenizer/normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace lily {

namespace {

const icu::Normalizer2* instance(const std::string& form) {
  UErrorCode st = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  if (form == "NFC") n = icu::Normalizer2::getNFCInstance(st);
  if (form == "NFD") n = icu::Normalizer2::getNFDInstance(st);
  if (form == "NFKC") n = icu::Normalizer2::getNFKCInstance(st);
  if (form == "NFKD") n = icu::Normalizer2::getNFKDInstance(st);
  if (U_FAILURE(st) || !n) throw Error("ICU has no " + form + " normalizer: " + u_errorName(st));
  return n;
}

void add(const nlohmann::json& j, std::vector<std::string>& forms) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    throw Error("tokenizer.json: normalizer must be null or an object with a string \"type\"");
  std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      throw Error("tokenizer.json: normalizer Sequence needs a \"normalizers\" array");
    for (const auto& n : j["normalizers"]) add(n, forms);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    forms.push_back(type);
  } else {
    throw Error("tokenizer.json: unsupported normalizer type \"" + type + "\" (supported: NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  add(j, n.forms_);
  for (const auto& f : n.forms_) instance(f);  // fail at load time, not at encode time
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  bool ascii = true;
  for (unsigned char c : text) ascii = ascii && c < 0x80;
  if (ascii || forms_.empty()) return std::string(text);  // every normal form leaves ASCII as it is
  std::string cur(text);
  for (const auto& f : forms_) {
    const icu::Normalizer2* n = instance(f);
    UErrorCode st = U_ZERO_ERROR;
    if (n->isNormalizedUTF8(icu::StringPiece(cur.data(), static_cast<int32_t>(cur.size())), st) && U_SUCCESS(st))
      continue;
    st = U_ZERO_ERROR;
    std::string next;
    icu::StringByteSink<std::string> sink(&next, static_cast<int32_t>(cur.size()));
    n->normalizeUTF8(0, icu::StringPiece(cur.data(), static_cast<int32_t>(cur.size())), sink, nullptr, st);
    if (U_FAILURE(st)) throw Error(f + " normalization failed: " + u_errorName(st));
    cur = std::move(next);
  }
  return cur;
}

std::string Normalizer::describe() const {
  if (forms_.empty()) return "none";
  std::string s;
  for (const auto& f : forms_) s += (s.empty() ? "" : "+") + f;
  return s;
}

}  // namespace lily
