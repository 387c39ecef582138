// Small helpers for matching literal tags in text that arrives in pieces.
#pragma once
#include <cstddef>
#include <initializer_list>
#include <string_view>

namespace lily::tags {

inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kToolCallOpen = "<tool_call>";
inline constexpr std::string_view kToolCallClose = "</tool_call>";
inline constexpr std::string_view kFunctionOpen = "<function=";
inline constexpr std::string_view kFunctionClose = "</function>";
inline constexpr std::string_view kParameterOpen = "<parameter=";
inline constexpr std::string_view kParameterClose = "</parameter>";

// Whitespace as the tool-call formats use it between tags.
inline bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Index of the first non-whitespace character at or after `from` (text.size() if none).
inline std::size_t skip_space(std::string_view text, std::size_t from) {
  while (from < text.size() && is_space(text[from])) ++from;
  return from;
}

// True when `text` is non-empty and shorter than `tag` and `tag` begins with it: more input could
// complete the tag.
inline bool is_proper_prefix(std::string_view text, std::string_view tag) {
  return !text.empty() && text.size() < tag.size() && tag.substr(0, text.size()) == text;
}

// True when `text` could still grow into one of `tags` or already starts with one of them.
inline bool may_start_with(std::string_view text, std::initializer_list<std::string_view> tags) {
  for (std::string_view t : tags)
    if (text.empty() || is_proper_prefix(text, t) || text.substr(0, t.size()) == t) return true;
  return false;
}

// Length of the longest suffix of `text` that is a proper prefix of one of `tags` (0 if none):
// that suffix must be held back until the next piece of text shows whether the tag follows.
inline std::size_t held_suffix(std::string_view text, std::initializer_list<std::string_view> tags) {
  std::size_t best = 0;
  for (std::string_view t : tags) {
    std::size_t n = t.size() - 1 < text.size() ? t.size() - 1 : text.size();
    for (; n > best; --n)
      if (text.substr(text.size() - n) == t.substr(0, n)) {
        best = n;
        break;
      }
  }
  return best;
}

}  // namespace lily::tags
