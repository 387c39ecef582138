// Statement parsing: if/elif/else, for (with `if` filter, else, recursive), set (incl. namespace attributes and
// block set), macro, call blocks, filter blocks, with, break/continue and transformers' {% generation %} block.
#include "chat/jinja/parser.h"

namespace lily::jinja {
namespace detail {

namespace {
std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (size_t k = 0; k < v.size(); ++k) s += (k ? (k + 1 == v.size() ? " or '" : ", '") : "'") + v[k] + "'";
  return s;
}
}  // namespace

Body Parser::parse_body(const std::vector<std::string>& end_tags, const std::string& opener, size_t opener_off) {
  Guard g(*this, opener_off);
  Body body;
  while (true) {
    const Token& t = cur();
    if (t.type == Token::Type::Text) {
      auto s = std::make_shared<Stmt>();
      s->kind = Stmt::Kind::Text;
      s->offset = t.offset;
      s->text = t.s;
      body.push_back(s);
      ++p;
    } else if (t.type == Token::Type::VarBegin) {
      auto s = std::make_shared<Stmt>();
      s->kind = Stmt::Kind::Output;
      s->offset = t.offset;
      ++p;
      s->expr = parse_tuple(false, true, {}, false);
      if (cur().type != Token::Type::VarEnd) fail(cur().offset, "expected end of print statement, got " + describe(cur()));
      ++p;
      body.push_back(s);
    } else if (t.type == Token::Type::BlockBegin) {
      const Token& n = peek();
      if (n.type == Token::Type::Name &&
          std::find(end_tags.begin(), end_tags.end(), n.s) != end_tags.end()) {
        ++p;  // leave the cursor on the end tag's name
        return body;
      }
      ++p;
      body.push_back(parse_statement());
    } else if (t.type == Token::Type::Eof) {
      if (end_tags.empty()) return body;
      fail(opener_off, "unexpected end of template: the '" + opener + "' block is not closed (expected " +
                           join_names(end_tags) + ")");
    } else {
      fail(t.offset, "unexpected " + describe(t));
    }
  }
}

StmtPtr Parser::parse_statement() {
  size_t off = cur().offset;
  if (cur().type != Token::Type::Name) fail(off, "expected a tag name, got " + describe(cur()));
  std::string tag = cur().s;
  if (tag == "if") return parse_if(off);
  if (tag == "for") return parse_for(off);
  if (tag == "set") return parse_set(off);
  if (tag == "macro") return parse_macro(off);
  if (tag == "call") return parse_call_block(off);
  if (tag == "filter") return parse_filter_block(off);
  if (tag == "with") return parse_with(off);
  if (tag == "generation") {
    ++p;
    expect_block_end();
    auto s = std::make_shared<Stmt>();
    s->kind = Stmt::Kind::With;
    s->offset = off;
    s->body = parse_body({"endgeneration"}, "generation", off);
    ++p;
    expect_block_end();
    return s;
  }
  if (tag == "break" || tag == "continue") {
    if (loop_depth == 0) fail(off, "'" + tag + "' outside of a loop");
    ++p;
    expect_block_end();
    auto s = std::make_shared<Stmt>();
    s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
    s->offset = off;
    return s;
  }
  fail(off, "unknown tag '" + tag + "'");
}

StmtPtr Parser::parse_if(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::If;
  s->offset = off;
  ExprPtr c = parse_tuple(false, false, {}, false);
  expect_block_end();
  while (true) {
    Body b = parse_body({"elif", "else", "endif"}, "if", off);
    s->branches.emplace_back(c, std::move(b));
    std::string tag = cur().s;
    ++p;
    if (tag == "elif") {
      c = parse_tuple(false, false, {}, false);
      expect_block_end();
      continue;
    }
    if (tag == "else") {
      expect_block_end();
      s->else_body = parse_body({"endif"}, "if", off);
      ++p;
    }
    expect_block_end();
    return s;
  }
}

StmtPtr Parser::parse_for(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::For;
  s->offset = off;
  s->target = parse_assign_target(true, false, {"in"});
  if (!is_name("in")) fail(cur().offset, "expected 'in', got " + describe(cur()));
  ++p;
  s->expr = parse_tuple(false, false, {"recursive"}, false);
  if (is_name("if")) {
    ++p;
    s->cond = parse_expression();
  }
  if (is_name("recursive")) {
    ++p;
    s->recursive = true;
  }
  expect_block_end();
  ++loop_depth;
  s->body = parse_body({"endfor", "else"}, "for", off);
  --loop_depth;
  if (cur().s == "else") {
    ++p;
    expect_block_end();
    s->else_body = parse_body({"endfor"}, "for", off);
  }
  ++p;
  expect_block_end();
  return s;
}

ExprPtr Parser::parse_assign_target(bool with_tuple, bool with_namespace, const std::vector<std::string>& extra) {
  size_t off = cur().offset;
  if (with_namespace && cur().type == Token::Type::Name && peek().type == Token::Type::Op && peek().s == "." &&
      peek(2).type == Token::Type::Name) {
    auto base = node(Expr::Kind::Name, off);
    base->name = cur().s;
    auto n = node(Expr::Kind::GetAttr, peek().offset);
    n->name = peek(2).s;
    n->args = {base};
    p += 3;
    return n;
  }
  ExprPtr t;
  if (with_tuple) {
    t = parse_tuple(true, true, extra, false);
  } else {
    t = node(Expr::Kind::Name, off);
    t->name = expect_name();
  }
  auto check = [&](const ExprPtr& e) {
    if (e->kind != Expr::Kind::Name) fail(e->offset, "cannot assign to this expression");
    static const std::set<std::string> reserved = {"true", "false", "none", "True", "False", "None"};
    if (reserved.count(e->name)) fail(e->offset, "cannot assign to '" + e->name + "'");
  };
  if (t->kind == Expr::Kind::Tuple) {
    for (const auto& e : t->args) check(e);
  } else if (t->kind == Expr::Kind::Const) {
    fail(t->offset, "cannot assign to a constant");
  } else {
    check(t);
  }
  return t;
}

StmtPtr Parser::parse_set(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->offset = off;
  s->target = parse_assign_target(true, true, {});
  if (is_op("=")) {
    ++p;
    s->kind = Stmt::Kind::Set;
    s->expr = parse_tuple(false, true, {}, false);
    expect_block_end();
    return s;
  }
  s->kind = Stmt::Kind::SetBlock;
  while (is_op("|")) {
    size_t o = cur().offset;
    ++p;
    s->filters.push_back(parse_filter(nullptr, o));
  }
  expect_block_end();
  s->body = parse_body({"endset"}, "set", off);
  ++p;
  expect_block_end();
  return s;
}

std::vector<MacroParam> Parser::parse_signature() {
  std::vector<MacroParam> params;
  expect_op("(");
  while (!is_op(")")) {
    if (!params.empty()) expect_op(",");
    MacroParam mp;
    size_t o = cur().offset;
    mp.name = expect_name();
    for (const auto& q : params)
      if (q.name == mp.name) fail(o, "duplicate argument '" + mp.name + "'");
    if (is_op("=")) {
      ++p;
      mp.def = parse_expression();
    } else if (!params.empty() && params.back().def) {
      fail(o, "non-default argument follows default argument");
    }
    params.push_back(std::move(mp));
  }
  ++p;
  return params;
}

StmtPtr Parser::parse_macro(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::Macro;
  s->offset = off;
  s->text = expect_name();
  s->params = parse_signature();
  expect_block_end();
  int saved = loop_depth;
  loop_depth = 0;
  s->body = parse_body({"endmacro"}, "macro", off);
  loop_depth = saved;
  ++p;
  if (cur().type == Token::Type::Name) ++p;
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_call_block(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::CallBlock;
  s->offset = off;
  if (is_op("(")) s->params = parse_signature();
  s->expr = parse_expression();
  if (s->expr->kind != Expr::Kind::Call) fail(s->expr->offset, "expected a call after 'call'");
  expect_block_end();
  int saved = loop_depth;
  loop_depth = 0;
  s->body = parse_body({"endcall"}, "call", off);
  loop_depth = saved;
  ++p;
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_filter_block(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::FilterBlock;
  s->offset = off;
  s->filters.push_back(parse_filter(nullptr, cur().offset));
  while (is_op("|")) {
    size_t o = cur().offset;
    ++p;
    s->filters.push_back(parse_filter(nullptr, o));
  }
  expect_block_end();
  s->body = parse_body({"endfilter"}, "filter", off);
  ++p;
  expect_block_end();
  return s;
}

StmtPtr Parser::parse_with(size_t off) {
  ++p;
  auto s = std::make_shared<Stmt>();
  s->kind = Stmt::Kind::With;
  s->offset = off;
  while (cur().type != Token::Type::BlockEnd) {
    if (!s->assigns.empty()) expect_op(",");
    ExprPtr t = parse_assign_target(true, false, {});
    expect_op("=");
    s->assigns.emplace_back(t, parse_expression());
  }
  expect_block_end();
  s->body = parse_body({"endwith"}, "with", off);
  ++p;
  expect_block_end();
  return s;
}

}  // namespace detail

std::shared_ptr<Program> parse_template(const std::string& source) {
  detail::Parser ps(lex(source));
  auto prog = std::make_shared<Program>();
  prog->body = ps.parse_body({}, "", 0);
  prog->source = ps.lx.source;
  return prog;
}

}  // namespace lily::jinja
