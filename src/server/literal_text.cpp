#include "server/literal_text.h"

namespace lily {
namespace {

const std::string kOpen = "\xEE\x80\x80";   // U+E000
const std::string kClose = "\xEE\x80\x81";  // U+E001

}  // namespace

std::string mask_special_text(const std::string& s, const std::vector<std::string>& specials,
                              std::vector<std::string>& literals) {
  std::string out;
  size_t plain = 0;  // start of the text not yet copied
  for (size_t i = 0; i < s.size();) {
    const std::string* hit = nullptr;
    if (s.compare(i, kOpen.size(), kOpen) == 0) hit = &kOpen;
    for (size_t k = 0; !hit && k < specials.size(); ++k)
      if (!specials[k].empty() && s[i] == specials[k][0] && s.compare(i, specials[k].size(), specials[k]) == 0)
        hit = &specials[k];
    if (!hit) {
      ++i;
      continue;
    }
    out.append(s, plain, i - plain);
    out += kOpen + std::to_string(literals.size()) + kClose;
    literals.push_back(*hit);
    i += hit->size();
    plain = i;
  }
  if (plain == 0) return s;
  out.append(s, plain, std::string::npos);
  return out;
}

void mask_special_text(nlohmann::ordered_json& j, const std::vector<std::string>& specials,
                       std::vector<std::string>& literals) {
  if (j.is_string()) {
    j = mask_special_text(j.get_ref<const std::string&>(), specials, literals);
  } else if (j.is_array() || j.is_object()) {
    for (auto& v : j) mask_special_text(v, specials, literals);
  }
}

std::string unmask_special_text(const std::string& rendered, const std::vector<std::string>& literals,
                                std::vector<size_t>& offsets) {
  if (literals.empty()) return rendered;
  std::string out;
  out.reserve(rendered.size());
  size_t i = 0;
  while (i < rendered.size()) {
    size_t at = rendered.find(kOpen, i);
    if (at == std::string::npos) break;
    out.append(rendered, i, at - i);
    size_t d = at + kOpen.size(), e = d;
    while (e < rendered.size() && e - d < 9 && rendered[e] >= '0' && rendered[e] <= '9') ++e;
    if (e > d && rendered.compare(e, kClose.size(), kClose) == 0) {
      const size_t idx = std::stoul(rendered.substr(d, e - d));
      if (idx < literals.size()) {
        offsets.push_back(out.size());
        out += literals[idx];
        i = e + kClose.size();
        continue;
      }
    }
    out += kOpen;  // not one of ours (the template cut it): keep the character
    i = d;
  }
  out.append(rendered, i, std::string::npos);
  return out;
}

}  // namespace lily
