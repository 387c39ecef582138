#include "tokenizer/utf8.h"

namespace lily::utf8 {

Step next(std::string_view s, uint32_t* cp, size_t* len) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t n = s.size();
  unsigned b0 = p[0];
  if (b0 < 0x80) {
    *cp = b0;
    *len = 1;
    return Step::Ok;
  }
  size_t need;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte (Unicode Table 3-7)
  uint32_t c;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
    c = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    c = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    c = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *len = 1;
    return Step::Invalid;
  }
  for (size_t i = 1; i < need; ++i) {
    if (i >= n) {
      *len = n;
      return Step::Incomplete;
    }
    unsigned b = p[i];
    unsigned l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      *len = i;
      return Step::Invalid;
    }
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  *len = need;
  return Step::Ok;
}

size_t first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    uint32_t cp;
    size_t len;
    if (next(s.substr(i), &cp, &len) != Step::Ok) return i;
    i += len;
  }
  return std::string_view::npos;
}

void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

size_t lossy_prefix(std::string_view bytes, std::string& out) {
  size_t i = 0;
  while (i < bytes.size()) {
    size_t run = i;  // copy ASCII and well-formed sequences in bulk
    while (run < bytes.size()) {
      if (static_cast<unsigned char>(bytes[run]) < 0x80) {
        ++run;
        continue;
      }
      uint32_t cp;
      size_t len;
      if (next(bytes.substr(run), &cp, &len) != Step::Ok) break;
      run += len;
    }
    out.append(bytes.data() + i, run - i);
    i = run;
    if (i == bytes.size()) break;
    uint32_t cp;
    size_t len;
    Step st = next(bytes.substr(i), &cp, &len);
    if (st == Step::Incomplete) return i;
    out += kReplacement;
    i += len;
  }
  return i;
}

std::string lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t used = lossy_prefix(bytes, out);
  if (used < bytes.size()) out += kReplacement;  // an unfinished sequence at the end: one U+FFFD
  return out;
}

}  // namespace lily::utf8
