// Jinja lexer: splits template source into text and tag tokens, applying whitespace control ({%- -%}, {{- -}},
// {#- -#}) and the trim_blocks / lstrip_blocks settings transformers uses; newlines are normalised to \n and
// one trailing newline is dropped (jinja2's keep_trailing_newline=False).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lily::jinja {

struct Token {
  enum class Type { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };
  Type type = Type::Eof;
  std::string s;  // text, name, string value or operator
  int64_t i = 0;
  double f = 0;
  size_t offset = 0;  // byte offset into the normalised source
};

// Where an offset lies, for messages: "line L, column C".
struct SourceMap {
  std::vector<size_t> line_starts;
  explicit SourceMap(const std::string& src);
  std::string where(size_t offset) const;
};

struct LexResult {
  std::string source;  // normalised
  std::vector<Token> tokens;
};

// Throws lily::Error naming line and column.
LexResult lex(const std::string& source);

}  // namespace lily::jinja
