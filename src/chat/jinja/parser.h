// Recursive-descent parser for the Jinja grammar; this header holds the parser state and the expression grammar
// (jinja2's precedence: conditional < or < and < not < comparison < + - < ~ < * / // % < ** < unary <
// postfix/filters/tests). Statements are parsed in parser.cpp. Internal to src/chat/jinja.
#pragma once
#include <algorithm>
#include <set>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"
#include "core/error.h"

namespace lily::jinja::detail {

constexpr int kMaxDepth = 200;

struct Parser {
  LexResult lx;
  SourceMap map;
  size_t p = 0;
  int depth = 0;
  int loop_depth = 0;

  explicit Parser(LexResult l) : lx(std::move(l)), map(lx.source) {}

  const Token& cur() const { return lx.tokens[p]; }
  const Token& peek(size_t k = 1) const { return lx.tokens[std::min(p + k, lx.tokens.size() - 1)]; }
  [[noreturn]] void fail(size_t off, const std::string& msg) const {
    throw Error("template syntax error at " + map.where(off) + ": " + msg);
  }
  bool is_op(const char* op) const { return cur().type == Token::Type::Op && cur().s == op; }
  bool is_name(const char* n) const { return cur().type == Token::Type::Name && cur().s == n; }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case Token::Type::Eof: return "end of template";
      case Token::Type::BlockEnd: return "end of statement block";
      case Token::Type::VarEnd: return "end of print statement";
      case Token::Type::Text: return "template text";
      default: return "'" + t.s + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur().offset, std::string("expected '") + op + "', got " + describe(cur()));
    ++p;
  }
  std::string expect_name() {
    if (cur().type != Token::Type::Name) fail(cur().offset, "expected a name, got " + describe(cur()));
    return lx.tokens[p++].s;
  }
  void expect_block_end() {
    if (cur().type != Token::Type::BlockEnd) fail(cur().offset, "expected end of statement block, got " + describe(cur()));
    ++p;
  }
  struct Guard {
    Parser& ps;
    Guard(Parser& x, size_t off) : ps(x) {
      if (++ps.depth > kMaxDepth) ps.fail(off, "template nested too deeply");
    }
    ~Guard() { --ps.depth; }
  };

  ExprPtr node(Expr::Kind k, size_t off) {
    auto e = std::make_shared<Expr>();
    e->kind = k;
    e->offset = off;
    return e;
  }

  // ---- expressions ----

  ExprPtr parse_expression(bool with_condexpr = true) {
    Guard g(*this, cur().offset);
    ExprPtr e = parse_or();
    if (!with_condexpr) return e;
    while (is_name("if")) {
      size_t off = cur().offset;
      ++p;
      ExprPtr c = parse_or();
      ExprPtr alt;
      if (is_name("else")) {
        ++p;
        alt = parse_expression();
      }
      auto n = node(Expr::Kind::Cond, off);
      n->args = {e, c, alt};
      e = n;
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr a, ExprPtr b, size_t off) {
    auto n = node(Expr::Kind::Binary, off);
    n->name = op;
    n->args = {std::move(a), std::move(b)};
    return n;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) { size_t o = cur().offset; ++p; e = binary("or", e, parse_and(), o); }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) { size_t o = cur().offset; ++p; e = binary("and", e, parse_not(), o); }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Guard g(*this, cur().offset);
      auto n = node(Expr::Kind::Unary, cur().offset);
      ++p;
      n->name = "not";
      n->args = {parse_not()};
      return n;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    size_t off = cur().offset;
    ExprPtr e = parse_math1();
    auto n = node(Expr::Kind::Compare, off);
    n->args.push_back(e);
    while (true) {
      static const std::set<std::string> ops = {"==", "!=", "<", ">", "<=", ">="};
      if (cur().type == Token::Type::Op && ops.count(cur().s)) {
        n->ops.push_back(cur().s);
        ++p;
      } else if (is_name("in")) {
        n->ops.push_back("in");
        ++p;
      } else if (is_name("not") && peek().type == Token::Type::Name && peek().s == "in") {
        n->ops.push_back("not in");
        p += 2;
      } else {
        break;
      }
      n->args.push_back(parse_math1());
    }
    return n->ops.empty() ? e : n;
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = cur().s;
      size_t o = cur().offset;
      ++p;
      e = binary(op, e, parse_concat(), o);
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) { size_t o = cur().offset; ++p; e = binary("~", e, parse_math2(), o); }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = cur().s;
      size_t o = cur().offset;
      ++p;
      e = binary(op, e, parse_pow(), o);
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary();
    while (is_op("**")) { size_t o = cur().offset; ++p; e = binary("**", e, parse_unary(), o); }
    return e;
  }
  ExprPtr parse_unary(bool with_filter = true) {
    Guard g(*this, cur().offset);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      e = node(Expr::Kind::Unary, cur().offset);
      e->name = cur().s;
      ++p;
      e->args = {parse_unary(false)};
    } else {
      e = parse_primary();
    }
    e = parse_postfix(e);
    if (with_filter) e = parse_filter_expr(e);
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    size_t off = t.offset;
    switch (t.type) {
      case Token::Type::Name: {
        ++p;
        auto c = node(Expr::Kind::Const, off);
        if (t.s == "true" || t.s == "True") c->value = Value::boolean(true);
        else if (t.s == "false" || t.s == "False") c->value = Value::boolean(false);
        else if (t.s == "none" || t.s == "None") c->value = Value::none();
        else { c->kind = Expr::Kind::Name; c->name = t.s; }
        return c;
      }
      case Token::Type::String: {
        std::string s;
        while (cur().type == Token::Type::String) s += lx.tokens[p++].s;
        auto c = node(Expr::Kind::Const, off);
        c->value = Value::string(std::move(s));
        return c;
      }
      case Token::Type::Int: case Token::Type::Float: {
        auto c = node(Expr::Kind::Const, off);
        c->value = t.type == Token::Type::Int ? Value::integer(t.i) : Value::number(t.f);
        ++p;
        return c;
      }
      case Token::Type::Op:
        if (t.s == "(") {
          ++p;
          ExprPtr e = parse_tuple(false, true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.s == "[") {
          ++p;
          auto l = node(Expr::Kind::List, off);
          while (!is_op("]")) {
            if (!l->args.empty()) expect_op(",");
            if (is_op("]")) break;
            l->args.push_back(parse_expression());
          }
          ++p;
          return l;
        }
        if (t.s == "{") {
          ++p;
          auto d = node(Expr::Kind::Dict, off);
          while (!is_op("}")) {
            if (!d->args.empty()) expect_op(",");
            if (is_op("}")) break;
            d->args.push_back(parse_expression());
            expect_op(":");
            d->args.push_back(parse_expression());
          }
          ++p;
          return d;
        }
        break;
      default: break;
    }
    fail(off, "unexpected " + describe(t));
  }

  bool is_tuple_end(const std::vector<std::string>& extra) const {
    if (cur().type == Token::Type::VarEnd || cur().type == Token::Type::BlockEnd || is_op(")")) return true;
    for (const auto& n : extra)
      if (cur().type == Token::Type::Name && cur().s == n) return true;
    return false;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens) {
    size_t off = cur().offset;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      if (simplified) items.push_back(parse_postfix(parse_primary()));
      else items.push_back(parse_expression(with_condexpr));
      if (is_op(",")) is_tuple = true;
      else break;
    }
    if (!is_tuple) {
      if (!items.empty()) return items[0];
      if (!explicit_parens) fail(cur().offset, "expected an expression, got " + describe(cur()));
    }
    auto t = node(Expr::Kind::Tuple, off);
    t->args = std::move(items);
    return t;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      size_t off = cur().offset;
      if (is_op(".")) {
        ++p;
        if (cur().type == Token::Type::Name) {
          auto n = node(Expr::Kind::GetAttr, off);
          n->name = lx.tokens[p++].s;
          n->args = {e};
          e = n;
        } else if (cur().type == Token::Type::Int) {
          auto n = node(Expr::Kind::GetItem, off);
          auto c = node(Expr::Kind::Const, cur().offset);
          c->value = Value::integer(lx.tokens[p++].i);
          n->args = {e, c};
          e = n;
        } else {
          fail(cur().offset, "expected an attribute name, got " + describe(cur()));
        }
      } else if (is_op("[")) {
        ++p;
        e = parse_subscript(e, off);
      } else if (is_op("(")) {
        e = parse_call(e);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr e, size_t off) {
    auto slice_part = [&]() -> ExprPtr {
      if (is_op(":") || is_op("]") || is_op(",")) return nullptr;
      return parse_expression();
    };
    ExprPtr a = slice_part();
    if (is_op(":")) {
      auto n = node(Expr::Kind::Slice, off);
      ++p;
      ExprPtr b = slice_part(), c;
      if (is_op(":")) {
        ++p;
        c = slice_part();
      }
      expect_op("]");
      n->args = {e, a, b, c};
      return n;
    }
    if (!a) fail(cur().offset, "expected a subscript expression");
    if (is_op(",")) {
      auto t = node(Expr::Kind::Tuple, a->offset);
      t->args.push_back(a);
      while (is_op(",")) {
        ++p;
        if (is_op("]")) break;
        t->args.push_back(parse_expression());
      }
      a = t;
    }
    expect_op("]");
    auto n = node(Expr::Kind::GetItem, off);
    n->args = {e, a};
    return n;
  }

  void parse_args(Expr& n) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        expect_op(",");
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) fail(cur().offset, "*args / **kwargs in calls are not supported");
      if (cur().type == Token::Type::Name && peek().type == Token::Type::Op && peek().s == "=") {
        std::string k = lx.tokens[p].s;
        p += 2;
        n.kwargs.emplace_back(k, parse_expression());
      } else {
        if (!n.kwargs.empty()) fail(cur().offset, "positional argument after keyword argument");
        n.args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto n = node(Expr::Kind::Call, cur().offset);
    n->args.push_back(callee);
    parse_args(*n);
    return n;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (is_op(".") && peek().type == Token::Type::Name) {
      p++;
      name += "." + expect_name();
    }
    return name;
  }

  ExprPtr parse_filter(ExprPtr subject, size_t off) {
    auto n = node(Expr::Kind::Filter, off);
    n->name = dotted_name();
    n->args.push_back(subject);
    if (is_op("(")) parse_args(*n);
    return n;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      size_t off = cur().offset;
      if (is_op("|")) {
        ++p;
        e = parse_filter(e, off);
      } else if (is_name("is")) {
        ++p;
        auto n = node(Expr::Kind::Test, off);
        if (is_name("not")) { n->negated = true; ++p; }
        n->name = dotted_name();
        n->args.push_back(e);
        if (is_op("(")) {
          parse_args(*n);
        } else {
          const Token& t = cur();
          bool starts_arg = t.type == Token::Type::Name || t.type == Token::Type::String || t.type == Token::Type::Int ||
                            t.type == Token::Type::Float || (t.type == Token::Type::Op && (t.s == "[" || t.s == "{"));
          if (starts_arg && !(t.type == Token::Type::Name && (t.s == "else" || t.s == "or" || t.s == "and"))) {
            if (is_name("is")) fail(t.offset, "you cannot chain multiple tests with 'is'");
            n->args.push_back(parse_postfix(parse_primary()));
          }
        }
        e = n;
      } else if (is_op("(")) {
        e = parse_call(e);
      } else {
        return e;
      }
    }
  }

  // ---- statements (parser.cpp) ----
  Body parse_body(const std::vector<std::string>& end_tags, const std::string& opener, size_t opener_off);
  StmtPtr parse_statement();
  StmtPtr parse_if(size_t off);
  StmtPtr parse_for(size_t off);
  StmtPtr parse_set(size_t off);
  StmtPtr parse_macro(size_t off);
  StmtPtr parse_call_block(size_t off);
  StmtPtr parse_filter_block(size_t off);
  StmtPtr parse_with(size_t off);
  ExprPtr parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra);
  std::vector<MacroParam> parse_signature();
};

}  // namespace lily::jinja::detail
