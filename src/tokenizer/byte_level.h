// The GPT-2 byte-level alphabet: every byte 0..255 is shown as one printable code point (printable Latin-1 bytes
// stand for themselves, the other 68 bytes for U+0100.., in byte order). Vocab entries are spelled in it.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace lily::byte_level {

// The code point that stands for byte b.
uint32_t byte_to_cp(uint8_t b);

// The byte a code point stands for, or -1 when cp is not in the alphabet.
int cp_to_byte(uint32_t cp);

// Raw bytes -> the alphabet's UTF-8 spelling (what appears in vocab and merges).
std::string encode(std::string_view bytes);

// Alphabet spelling -> raw bytes. Returns false (out untouched) when s holds a code point outside the alphabet
// or is not well-formed UTF-8.
bool decode(std::string_view s, std::string* out);

}  // namespace lily::byte_level
