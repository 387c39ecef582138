#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace lily::byte_level {

namespace {

struct Tables {
  std::array<uint32_t, 256> to_cp{};
  std::array<int16_t, 324> to_byte{};  // every code point of the alphabet is below 256 + 68
  Tables() {
    to_byte.fill(-1);
    uint32_t extra = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      uint32_t cp = printable ? static_cast<uint32_t>(b) : extra++;
      to_cp[b] = cp;
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

uint32_t byte_to_cp(uint8_t b) { return tables().to_cp[b]; }

int cp_to_byte(uint32_t cp) { return cp < tables().to_byte.size() ? tables().to_byte[cp] : -1; }

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, tables().to_cp[b]);
  return out;
}

bool decode(std::string_view s, std::string* out) {
  std::string r;
  r.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    uint32_t cp;
    size_t len;
    if (utf8::next(s.substr(i), &cp, &len) != utf8::Step::Ok) return false;
    int b = cp_to_byte(cp);
    if (b < 0) return false;
    r += static_cast<char>(b);
    i += len;
  }
  *out = std::move(r);
  return true;
}

}  // namespace lily::byte_level
