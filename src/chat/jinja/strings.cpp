// Python str semantics on UTF-8: whitespace and case rules follow Unicode (case mapping via ICU, full mappings
// like Python: 'ß'.upper() == 'SS').
#include "chat/jinja/strings.h"

#include <unicode/locid.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include "chat/jinja/value.h"

namespace lily::jinja {

namespace {

std::string icu_case(const std::string& s, bool upper) {
  bool ascii = true;
  for (unsigned char c : s) ascii = ascii && c < 0x80;
  if (ascii) {
    std::string out = s;
    for (char& c : out) {
      if (upper && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
      if (!upper && c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    }
    return out;
  }
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(s);
  if (upper) u.toUpper(icu::Locale::getRoot());
  else u.toLower(icu::Locale::getRoot());
  std::string out;
  u.toUTF8String(out);
  return out;
}

std::string cp_str(char32_t c) {
  std::string s;
  utf8_append(s, c);
  return s;
}

std::string title_char(char32_t c) {
  if (c < 0x80) return cp_str(c >= 'a' && c <= 'z' ? c - 32 : c);
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(cp_str(c));
  u.toTitle(nullptr, icu::Locale::getRoot(), U_TITLECASE_NO_LOWERCASE | U_TITLECASE_NO_BREAK_ADJUSTMENT);
  std::string out;
  u.toUTF8String(out);
  return out;
}

bool cased(char32_t c) { return u_hasBinaryProperty(static_cast<UChar32>(c), UCHAR_CASED); }

}  // namespace

bool cp_is_alpha(char32_t c) { return u_isalpha(static_cast<UChar32>(c)); }
bool cp_is_digit(char32_t c) { return u_isdigit(static_cast<UChar32>(c)); }
bool cp_is_alnum(char32_t c) { return cp_is_alpha(c) || u_isdigit(static_cast<UChar32>(c)) || u_getNumericValue(static_cast<UChar32>(c)) != U_NO_NUMERIC_VALUE; }
bool cp_is_upper(char32_t c) { return u_isUUppercase(static_cast<UChar32>(c)); }
bool cp_is_lower(char32_t c) { return u_isULowercase(static_cast<UChar32>(c)); }

std::string py_upper(const std::string& s) { return icu_case(s, true); }
std::string py_lower(const std::string& s) { return icu_case(s, false); }

std::string py_title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (char32_t c : utf8_decode(s)) {
    if (prev_cased) out += icu_case(cp_str(c), false);
    else out += title_char(c);
    prev_cased = cased(c);
  }
  return out;
}

std::string py_capitalize(const std::string& s) {
  auto cps = utf8_decode(s);
  if (cps.empty()) return s;
  std::string rest = utf8_encode(std::vector<char32_t>(cps.begin() + 1, cps.end()));
  return title_char(cps[0]) + icu_case(rest, false);
}

std::string py_swapcase(const std::string& s) {
  std::string out;
  for (char32_t c : utf8_decode(s)) {
    if (cp_is_upper(c)) out += icu_case(cp_str(c), false);
    else if (cp_is_lower(c)) out += icu_case(cp_str(c), true);
    else utf8_append(out, c);
  }
  return out;
}

std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right) {
  auto cps = utf8_decode(s);
  std::vector<char32_t> set;
  if (chars) set = utf8_decode(*chars);
  auto strip_it = [&](char32_t c) {
    if (!chars) return is_py_space(c);
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<long>(b), cps.begin() + static_cast<long>(e)));
}

std::vector<std::string> py_split(const std::string& s, const std::string* sep, long maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<long>(out.size()) < maxsplit) {
      size_t f = s.find(*sep, pos);
      if (f == std::string::npos) break;
      out.push_back(s.substr(pos, f - pos));
      pos = f + sep->size();
    }
    out.push_back(s.substr(pos));
    return out;
  }
  auto cps = utf8_decode(s);
  size_t k = 0, n = cps.size();
  while (true) {
    while (k < n && is_py_space(cps[k])) ++k;
    if (k >= n) break;
    if (maxsplit >= 0 && static_cast<long>(out.size()) >= maxsplit) {
      size_t e = n;
      while (e > k && is_py_space(cps[e - 1])) --e;
      out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<long>(k), cps.begin() + static_cast<long>(e))));
      break;
    }
    size_t b = k;
    while (k < n && !is_py_space(cps[k])) ++k;
    out.push_back(utf8_encode(std::vector<char32_t>(cps.begin() + static_cast<long>(b), cps.begin() + static_cast<long>(k))));
  }
  return out;
}

std::vector<std::string> py_rsplit(const std::string& s, const std::string* sep, long maxsplit) {
  if (maxsplit < 0) return py_split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    size_t end = s.size();
    while (static_cast<long>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t f = s.rfind(*sep, end - sep->size());
      if (f == std::string::npos) break;
      out.insert(out.begin(), s.substr(f + sep->size(), end - f - sep->size()));
      end = f;
    }
    out.insert(out.begin(), s.substr(0, end));
    return out;
  }
  auto cps = utf8_decode(s);
  long k = static_cast<long>(cps.size());
  while (true) {
    while (k > 0 && is_py_space(cps[static_cast<size_t>(k - 1)])) --k;
    if (k <= 0) break;
    if (static_cast<long>(out.size()) >= maxsplit) {
      long b = 0;
      while (b < k && is_py_space(cps[static_cast<size_t>(b)])) ++b;
      out.insert(out.begin(), utf8_encode(std::vector<char32_t>(cps.begin() + b, cps.begin() + k)));
      break;
    }
    long e = k;
    while (k > 0 && !is_py_space(cps[static_cast<size_t>(k - 1)])) --k;
    out.insert(out.begin(), utf8_encode(std::vector<char32_t>(cps.begin() + k, cps.begin() + e)));
  }
  return out;
}

std::vector<std::string> py_splitlines(const std::string& s, bool keepends) {
  std::vector<std::string> out;
  auto cps = utf8_decode(s);
  std::vector<char32_t> line;
  for (size_t k = 0; k < cps.size(); ++k) {
    char32_t c = cps[k];
    bool brk = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d || c == 0x1e ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      line.push_back(c);
      continue;
    }
    std::vector<char32_t> end{c};
    if (c == '\r' && k + 1 < cps.size() && cps[k + 1] == '\n') {
      end.push_back('\n');
      ++k;
    }
    if (keepends) line.insert(line.end(), end.begin(), end.end());
    out.push_back(utf8_encode(line));
    line.clear();
  }
  if (!line.empty()) out.push_back(utf8_encode(line));
  return out;
}

std::string py_replace(const std::string& s, const std::string& old, const std::string& rep, long count) {
  std::string out;
  if (old.empty()) {
    auto cps = utf8_decode(s);
    long n = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || n < count) {
        out += rep;
        ++n;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  long n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(old, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += rep;
    pos = f + old.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

long py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<long>(utf8_length(s)) + 1;
  long n = 0;
  for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
  return n;
}

long cp_index(const std::string& s, size_t byte_offset) {
  return static_cast<long>(utf8_length(s.substr(0, byte_offset)));
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace lily::jinja
