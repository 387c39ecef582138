// Syntax tree of a parsed template: expressions and statements, each with the source offset it came from.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/jinja/value.h"

namespace lily::jinja {

struct Expr;
using ExprPtr = std::shared_ptr<Expr>;

struct Expr {
  enum class Kind {
    Const,     // value
    Name,      // name
    List,      // args
    Tuple,     // args
    Dict,      // args: key, value, key, value...
    GetAttr,   // args[0] . name
    GetItem,   // args[0] [ args[1] ]
    Slice,     // args[0] [ args[1] : args[2] : args[3] ]  (null = omitted)
    Call,      // args[0] ( args[1..], kwargs )
    Filter,    // name; args[0] = subject (null inside a filter block), args[1..] + kwargs
    Test,      // name; args[0] = subject, args[1..]; negated
    Unary,     // name in {"-", "+", "not"}; args[0]
    Binary,    // name: operator incl. "and", "or", "~", "//", "**"; args[0], args[1]
    Compare,   // args[0] ops[0] args[1] ops[1] args[2] ...
    Cond,      // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind = Kind::Const;
  size_t offset = 0;
  Value value;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Stmt;
using StmtPtr = std::shared_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr def;  // null: required
};

struct Stmt {
  enum class Kind { Text, Output, If, For, Set, SetBlock, Macro, CallBlock, FilterBlock, With, Break, Continue };
  Kind kind = Kind::Text;
  size_t offset = 0;
  std::string text;                                // Text; Macro: name
  ExprPtr expr;                                    // Output, Set value, For iterable, CallBlock call
  ExprPtr target;                                  // Set / SetBlock / For target
  ExprPtr cond;                                    // For `if` filter
  std::vector<std::pair<ExprPtr, Body>> branches;  // If: condition, body
  Body body;                                       // For, SetBlock, Macro, CallBlock, FilterBlock, With
  Body else_body;                                  // If, For
  std::vector<ExprPtr> filters;                    // SetBlock / FilterBlock: Filter exprs with null subject
  std::vector<MacroParam> params;                  // Macro; CallBlock: caller's params
  std::vector<std::pair<ExprPtr, ExprPtr>> assigns;  // With: target, value
  bool recursive = false;                          // For ... recursive
};

struct Program {
  std::string source;  // normalised source (for error positions)
  Body body;
};

// Parses a template; throws lily::Error with line and column.
std::shared_ptr<Program> parse_template(const std::string& source);

}  // namespace lily::jinja
