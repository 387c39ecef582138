// Jinja lexer (see lexer.h). Mirrors jinja2's rules: tag ends are only recognised outside brackets, `-` strips
// all whitespace on that side, `+` disables lstrip/trim, lstrip_blocks removes spaces/tabs that start a line
// before {% or {#, trim_blocks removes the first newline after %} or #}.
#include "chat/jinja/lexer.h"

#include <cctype>
#include <cstdlib>

#include "chat/jinja/value.h"
#include "core/error.h"

namespace lily::jinja {

SourceMap::SourceMap(const std::string& src) {
  line_starts.push_back(0);
  for (size_t k = 0; k < src.size(); ++k)
    if (src[k] == '\n') line_starts.push_back(k + 1);
}

std::string SourceMap::where(size_t offset) const {
  size_t lo = 0, hi = line_starts.size();
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (line_starts[mid] <= offset) lo = mid;
    else hi = mid;
  }
  return "line " + std::to_string(lo + 1) + ", column " + std::to_string(offset - line_starts[lo] + 1);
}

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

struct Lexer {
  std::string src;
  SourceMap map;
  std::vector<Token> out;
  size_t pos = 0;
  bool line_starting = true;

  explicit Lexer(std::string s) : src(std::move(s)), map(src) {}

  [[noreturn]] void fail(size_t at, const std::string& msg) {
    throw Error("template syntax error at " + map.where(at) + ": " + msg);
  }

  void push(Token::Type t, size_t at, std::string s = {}) {
    Token k;
    k.type = t;
    k.offset = at;
    k.s = std::move(s);
    out.push_back(std::move(k));
  }

  void emit_text(std::string text, char modifier, bool lstrip_applies, size_t at) {
    if (modifier == '-') {
      size_t e = text.size();
      while (e > 0 && is_ws(text[e - 1])) --e;
      text.resize(e);
    } else if (modifier != '+' && lstrip_applies) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
        bool all_ws = true;
        for (size_t k = l_pos; k < text.size(); ++k) all_ws = all_ws && is_ws(text[k]);
        if (all_ws) text.resize(l_pos);
      }
    }
    if (!text.empty()) push(Token::Type::Text, at, std::move(text));
  }

  // After a tag end at `p` (index just past the delimiter) with strip sign `sign`.
  void after_end(size_t p, char sign, bool trim) {
    if (sign == '-') {
      while (p < src.size() && is_ws(src[p])) ++p;
    } else if (sign != '+' && trim && p < src.size() && src[p] == '\n') {
      ++p;
    }
    line_starting = p > 0 && src[p - 1] == '\n';
    pos = p;
  }

  bool starts(size_t p, const char* s) const { return src.compare(p, std::char_traits<char>::length(s), s) == 0; }

  void lex_string(size_t& p) {
    char q = src[p];
    size_t start = p++;
    std::string v;
    while (true) {
      if (p >= src.size()) fail(start, "unexpected end of string");
      char c = src[p];
      if (c == q) { ++p; break; }
      if (c != '\\') { v += c; ++p; continue; }
      if (p + 1 >= src.size()) fail(start, "unexpected end of string");
      char e = src[p + 1];
      p += 2;
      auto hex = [&](int n) -> char32_t {
        if (p + n > src.size()) fail(start, "truncated escape in string");
        char32_t cp = 0;
        for (int k = 0; k < n; ++k) {
          char h = src[p + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail(p, "bad escape in string");
          cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        p += n;
        return cp;
      };
      switch (e) {
        case 'n': v += '\n'; break;
        case 't': v += '\t'; break;
        case 'r': v += '\r'; break;
        case 'a': v += '\a'; break;
        case 'b': v += '\b'; break;
        case 'f': v += '\f'; break;
        case 'v': v += '\v'; break;
        case '\\': v += '\\'; break;
        case '\'': v += '\''; break;
        case '"': v += '"'; break;
        case '\n': break;
        case 'x': utf8_append(v, hex(2)); break;
        case 'u': utf8_append(v, hex(4)); break;
        case 'U': utf8_append(v, hex(8)); break;
        default:
          if (e >= '0' && e <= '7') {
            char32_t cp = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && p < src.size() && src[p] >= '0' && src[p] <= '7'; ++k) cp = cp * 8 + static_cast<char32_t>(src[p++] - '0');
            utf8_append(v, cp);
          } else {
            v += '\\';
            v += e;
          }
      }
    }
    push(Token::Type::String, start, std::move(v));
  }

  void lex_number(size_t& p) {
    size_t start = p;
    std::string digits;
    auto run = [&]() {
      while (p < src.size() && (std::isdigit(static_cast<unsigned char>(src[p])) ||
                                (src[p] == '_' && p + 1 < src.size() && std::isdigit(static_cast<unsigned char>(src[p + 1])))))
        if (src[p++] != '_') digits += src[p - 1];
    };
    run();
    bool is_float = false;
    if (p + 1 < src.size() && src[p] == '.' && std::isdigit(static_cast<unsigned char>(src[p + 1])) &&
        !(start > 0 && src[start - 1] == '.')) {
      is_float = true;
      digits += src[p++];
      run();
    }
    if (p < src.size() && (src[p] == 'e' || src[p] == 'E')) {
      size_t q = p + 1;
      if (q < src.size() && (src[q] == '+' || src[q] == '-')) ++q;
      if (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) {
        is_float = true;
        digits += 'e';
        digits.append(src, p + 1, q - p - 1);
        p = q;
        run();
      }
    }
    Token t;
    t.offset = start;
    if (is_float) {
      t.type = Token::Type::Float;
      t.f = std::strtod(digits.c_str(), nullptr);
    } else {
      t.type = Token::Type::Int;
      errno = 0;
      t.i = std::strtoll(digits.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(start, "integer literal too large");
    }
    out.push_back(t);
  }

  // Lexes the inside of a {{ }} or {% %} tag starting at pos; returns after the end delimiter.
  void lex_tag(bool block, size_t tag_start) {
    const char* end = block ? "%}" : "}}";
    int depth = 0;
    size_t p = pos;
    while (true) {
      while (p < src.size() && is_ws(src[p])) ++p;
      if (p >= src.size()) fail(tag_start, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (depth == 0) {
        char sign = 0;
        size_t q = p;
        if ((src[q] == '-' || src[q] == '+') && starts(q + 1, end)) sign = src[q++];
        if (starts(q, end) && (sign != '+' || block)) {
          push(block ? Token::Type::BlockEnd : Token::Type::VarEnd, p);
          after_end(q + 2, sign, block);
          return;
        }
      }
      char c = src[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t s = p;
        while (p < src.size() && (std::isalnum(static_cast<unsigned char>(src[p])) || src[p] == '_')) ++p;
        push(Token::Type::Name, s, src.substr(s, p - s));
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        lex_number(p);
      } else if (c == '\'' || c == '"') {
        lex_string(p);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (starts(p, t)) op = t;
        if (op.empty()) {
          if (std::string("+-*/%~[](){}><=.:|,;").find(c) == std::string::npos)
            fail(p, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') ++depth;
          if (c == ')' || c == ']' || c == '}') {
            if (depth == 0) fail(p, std::string("unexpected '") + c + "'");
            --depth;
          }
        }
        push(Token::Type::Op, p, op);
        p += op.size();
      }
    }
  }

  // {% raw %}...{% endraw %}: returns true if the tag at p (after "{%" and sign) is a raw block and handles it.
  bool try_raw(size_t p) {
    while (p < src.size() && is_ws(src[p])) ++p;
    if (!starts(p, "raw")) return false;
    p += 3;
    while (p < src.size() && is_ws(src[p])) ++p;
    char sign = 0;
    if (p < src.size() && (src[p] == '-' || src[p] == '+')) sign = src[p++];
    if (!starts(p, "%}")) return false;
    p += 2;
    if (sign == '-')
      while (p < src.size() && is_ws(src[p])) ++p;
    size_t body = p;
    for (size_t q = src.find("{%", p); q != std::string::npos; q = src.find("{%", q + 2)) {
      size_t r = q + 2;
      char bsign = 0;
      if (r < src.size() && (src[r] == '-' || src[r] == '+')) bsign = src[r++];
      while (r < src.size() && is_ws(src[r])) ++r;
      if (!starts(r, "endraw")) continue;
      r += 6;
      while (r < src.size() && is_ws(src[r])) ++r;
      char esign = 0;
      if (r < src.size() && (src[r] == '-' || src[r] == '+')) esign = src[r++];
      if (!starts(r, "%}")) continue;
      std::string text = src.substr(body, q - body);
      if (bsign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      }
      if (!text.empty()) push(Token::Type::Text, body, std::move(text));
      after_end(r + 2, esign, true);
      return true;
    }
    fail(body, "missing {% endraw %}");
  }

  void run() {
    while (pos < src.size()) {
      size_t p = pos;
      size_t found = std::string::npos;
      char kind = 0;
      for (size_t q = src.find('{', p); q != std::string::npos; q = src.find('{', q + 1)) {
        if (q + 1 < src.size() && (src[q + 1] == '{' || src[q + 1] == '%' || src[q + 1] == '#')) {
          found = q;
          kind = src[q + 1];
          break;
        }
      }
      if (found == std::string::npos) {
        push(Token::Type::Text, pos, src.substr(pos));
        break;
      }
      size_t after = found + 2;
      char sign = 0;
      if (after < src.size() && (src[after] == '-' || src[after] == '+')) sign = src[after++];
      emit_text(src.substr(pos, found - pos), sign, kind != '{', pos);
      if (kind == '#') {
        size_t e = src.find("#}", after);
        if (e == std::string::npos) fail(found, "missing end of comment tag");
        char esign = (e > after && (src[e - 1] == '-' || src[e - 1] == '+')) ? src[e - 1] : 0;
        after_end(e + 2, esign, true);
      } else if (kind == '%') {
        if (try_raw(after)) continue;
        push(Token::Type::BlockBegin, found);
        pos = after;
        lex_tag(true, found);
      } else {
        push(Token::Type::VarBegin, found);
        pos = after;
        lex_tag(false, found);
      }
    }
    push(Token::Type::Eof, src.size());
  }
};

}  // namespace

LexResult lex(const std::string& source) {
  std::string s;
  s.reserve(source.size());
  for (size_t k = 0; k < source.size(); ++k) {
    if (source[k] == '\r') {
      s += '\n';
      if (k + 1 < source.size() && source[k + 1] == '\n') ++k;
    } else {
      s += source[k];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  Lexer lx(std::move(s));
  lx.run();
  return LexResult{std::move(lx.src), std::move(lx.out)};
}

}  // namespace lily::jinja
