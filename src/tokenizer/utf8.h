// UTF-8 helpers shared by the tokenizer: strict decoding of one code point, validation, encoding, and the
// lossy conversion (each maximal ill-formed subsequence becomes one U+FFFD, as Rust's from_utf8_lossy does).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace lily::utf8 {

// Outcome of looking at the bytes at the front of a buffer.
enum class Step { Ok, Invalid, Incomplete };

// Decodes one code point at s[0..]. Ok: *cp and *len set. Invalid: *len is the length of the maximal ill-formed
// prefix (>= 1) that one U+FFFD replaces. Incomplete: the bytes are a valid but unfinished sequence that runs to
// the end of s (*len = s.size()).
Step next(std::string_view s, uint32_t* cp, size_t* len);

// Byte offset of the first ill-formed byte, or npos when all of s is well-formed UTF-8.
size_t first_invalid(std::string_view s);

void append(std::string& out, uint32_t cp);

// Well-formed UTF-8 from arbitrary bytes; ill-formed parts become U+FFFD (incomplete tail too).
std::string lossy(std::string_view bytes);

// Appends to `out` the well-formed text at the front of `bytes` and replaces ill-formed subsequences with U+FFFD,
// but stops before a trailing incomplete sequence; returns how many bytes were consumed.
size_t lossy_prefix(std::string_view bytes, std::string& out);

}  // namespace lily::utf8
