// Python str operations on UTF-8 text (code point based), shared by string methods and filters.
#pragma once
#include <string>
#include <vector>

namespace lily::jinja {

// strip/lstrip/rstrip: `chars` null = Python whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, long maxsplit);
std::vector<std::string> py_splitlines(const std::string& s, bool keepends);
std::string py_upper(const std::string& s);
std::string py_lower(const std::string& s);
std::string py_title(const std::string& s);
std::string py_capitalize(const std::string& s);
std::string py_swapcase(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, long count);
long py_count(const std::string& s, const std::string& sub);
// Byte offset to code point index (for find/index results).
long cp_index(const std::string& s, size_t byte_offset);
std::string html_escape(const std::string& s);
bool cp_is_alpha(char32_t c);
bool cp_is_digit(char32_t c);
bool cp_is_alnum(char32_t c);
bool cp_is_upper(char32_t c);
bool cp_is_lower(char32_t c);

}  // namespace lily::jinja
