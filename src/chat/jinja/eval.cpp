// Evaluator (see eval.h).
#include "chat/jinja/eval.h"

#include <algorithm>

#include "chat/jinja/ops.h"

namespace lily::jinja {

const Value* Scope::lookup(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get())
    for (const auto& kv : s->vars)
      if (kv.first == name) return &kv.second;
  return nullptr;
}

void Scope::set(const std::string& name, Value v) {
  for (auto& kv : vars)
    if (kv.first == name) {
      kv.second = std::move(v);
      return;
    }
  vars.emplace_back(name, std::move(v));
}

ArgReader::ArgReader(CallArgs& args, const char* function, std::vector<std::string> allowed)
    : a(args), fn(function), names(std::move(allowed)) {
  if (a.pos.size() > names.size())
    throw Error(std::string(fn) + "() takes at most " + std::to_string(names.size()) + " argument(s) (" +
                std::to_string(a.pos.size()) + " given)");
  for (const auto& kv : a.kw) {
    auto it = std::find(names.begin(), names.end(), kv.first);
    if (it == names.end()) throw Error(std::string(fn) + "() got an unexpected keyword argument '" + kv.first + "'");
    if (static_cast<size_t>(it - names.begin()) < a.pos.size())
      throw Error(std::string(fn) + "() got multiple values for argument '" + kv.first + "'");
  }
}

bool ArgReader::has(size_t pos) const {
  if (pos < a.pos.size()) return true;
  for (const auto& kv : a.kw)
    if (pos < names.size() && kv.first == names[pos]) return true;
  return false;
}

Value ArgReader::get(size_t pos, const Value& def) const {
  if (pos < a.pos.size()) return a.pos[pos];
  for (const auto& kv : a.kw)
    if (pos < names.size() && kv.first == names[pos]) return kv.second;
  return def;
}

Interpreter::Interpreter(std::shared_ptr<const Program> prog) : prog_(std::move(prog)), map_(prog_->source) {}

void Interpreter::emit(std::string& out, const std::string& s) {
  out += s;
  if (out.size() > kMaxOutput) throw Error("rendered output exceeds " + std::to_string(kMaxOutput) + " bytes");
}

std::string Interpreter::render(const Dict& globals) {
  auto root = std::make_shared<Scope>();
  root->vars = globals.items;
  auto top = std::make_shared<Scope>();
  top->parent = root;
  std::string out;
  // Macros hold their defining scope, which holds them: clear those scopes afterwards to free the cycle.
  struct Release {
    std::vector<ScopePtr>& scopes;
    ~Release() {
      for (auto& s : scopes) s->vars.clear();
      scopes.clear();
    }
  } release{macro_scopes_};
  exec_body(prog_->body, top, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const auto& s : body) {
    Flow f = exec(*s, scope, out);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

void Interpreter::assign(const Expr& target, const Value& v, const ScopePtr& scope) {
  if (target.kind == Expr::Kind::Name) {
    scope->set(target.name, v);
  } else if (target.kind == Expr::Kind::Tuple) {
    require_defined(v);
    if (!v.is_string() && !v.is_seq() && !v.is_mapping())
      throw Error("cannot unpack non-iterable " + v.type_name() + " object");
    List items = iterate(v);
    if (items.size() != target.args.size())
      throw Error(items.size() < target.args.size()
                      ? "not enough values to unpack (expected " + std::to_string(target.args.size()) + ", got " + std::to_string(items.size()) + ")"
                      : "too many values to unpack (expected " + std::to_string(target.args.size()) + ")");
    for (size_t k = 0; k < items.size(); ++k) assign(*target.args[k], items[k], scope);
  } else if (target.kind == Expr::Kind::GetAttr) {
    const Value* ns = scope->lookup(target.args[0]->name);
    if (!ns || ns->type != Value::Type::Namespace) throw Error("can only assign attributes of a namespace() object");
    ns->dict->set(target.name, v);
  } else {
    throw Error("cannot assign to this expression");
  }
}

Interpreter::Flow Interpreter::exec(const Stmt& s, const ScopePtr& scope, std::string& out) {
  try {
    switch (s.kind) {
      case Stmt::Kind::Text: emit(out, s.text); return Flow::Normal;
      case Stmt::Kind::Output: emit(out, to_str(eval(*s.expr, scope))); return Flow::Normal;
      case Stmt::Kind::If:
        for (const auto& br : s.branches)
          if (eval(*br.first, scope).truthy()) return exec_body(br.second, scope, out);
        return exec_body(s.else_body, scope, out);
      case Stmt::Kind::For: return exec_for(s, scope, out, eval(*s.expr, scope), 0);
      case Stmt::Kind::Set: assign(*s.target, eval(*s.expr, scope), scope); return Flow::Normal;
      case Stmt::Kind::SetBlock: case Stmt::Kind::FilterBlock: {
        std::string inner;
        auto sub = std::make_shared<Scope>();
        sub->parent = scope;
        exec_body(s.body, sub, inner);
        Value v = Value::string(std::move(inner));
        for (const auto& f : s.filters) {
          CallArgs a;
          eval_args(*f, 1, scope, a);
          v = apply_filter(f->name, v, a);
        }
        if (s.kind == Stmt::Kind::SetBlock) assign(*s.target, v, scope);
        else emit(out, to_str(v));
        return Flow::Normal;
      }
      case Stmt::Kind::Macro:
        macro_scopes_.push_back(scope);
        scope->set(s.text, make_macro(s, scope, &s.body, &s.params, s.text));
        return Flow::Normal;
      case Stmt::Kind::CallBlock: {
        const Expr& call_expr = *s.expr;
        Value callee = eval(*call_expr.args[0], scope);
        CallArgs a;
        eval_args(call_expr, 1, scope, a);
        macro_scopes_.push_back(scope);
        a.kw.emplace_back("caller", make_macro(s, scope, &s.body, &s.params, "caller"));
        emit(out, to_str(call(callee, a)));
        return Flow::Normal;
      }
      case Stmt::Kind::With: {
        auto sub = std::make_shared<Scope>();
        sub->parent = scope;
        for (const auto& as : s.assigns) assign(*as.first, eval(*as.second, scope), sub);
        return exec_body(s.body, sub, out);
      }
      case Stmt::Kind::Break: return Flow::Break;
      case Stmt::Kind::Continue: return Flow::Continue;
    }
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& e) {
    throw TemplateError("template error at " + where(s.offset) + ": " + e.what());
  }
  return Flow::Normal;
}

Interpreter::Flow Interpreter::exec_for(const Stmt& s, const ScopePtr& scope, std::string& out, const Value& iterable,
                                        int depth) {
  if (iterable.is_none()) throw Error("'NoneType' object is not iterable");
  List items = iterate(iterable);
  if (s.cond) {
    List kept;
    for (auto& it : items) {
      auto sub = std::make_shared<Scope>();
      sub->parent = scope;
      assign(*s.target, it, sub);
      if (eval(*s.cond, sub).truthy()) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto sub = std::make_shared<Scope>();
    sub->parent = scope;
    exec_body(s.else_body, sub, out);
    return Flow::Normal;
  }
  size_t n = items.size();
  for (size_t k = 0; k < n; ++k) {
    if (++iterations_ > kMaxIterations) throw Error("too many loop iterations");
    auto sub = std::make_shared<Scope>();
    sub->parent = scope;
    Dict loop;
    int64_t i = static_cast<int64_t>(k), len = static_cast<int64_t>(n);
    loop.set("index", Value::integer(i + 1));
    loop.set("index0", Value::integer(i));
    loop.set("revindex", Value::integer(len - i));
    loop.set("revindex0", Value::integer(len - i - 1));
    loop.set("first", Value::boolean(k == 0));
    loop.set("last", Value::boolean(k + 1 == n));
    loop.set("length", Value::integer(len));
    loop.set("depth", Value::integer(depth + 1));
    loop.set("depth0", Value::integer(depth));
    loop.set("previtem", k > 0 ? items[k - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", k + 1 < n ? items[k + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::callable("loop.cycle", [k](CallArgs& a) {
      if (a.pos.empty()) throw Error("no items for cycling given");
      return a.pos[k % a.pos.size()];
    }));
    if (s.recursive) {
      const Stmt* sp = &s;
      loop.set("__call__", Value::callable("loop", [this, sp, scope, depth](CallArgs& a) {
        if (a.pos.size() != 1) throw Error("loop() takes exactly one argument");
        if (++call_depth_ > kMaxCallDepth) throw Error("maximum recursion depth exceeded");
        std::string inner;
        try {
          exec_for(*sp, scope, inner, a.pos[0], depth + 1);
        } catch (...) {
          --call_depth_;
          throw;
        }
        --call_depth_;
        return Value::string(std::move(inner));
      }));
    }
    sub->set("loop", Value::make_dict(std::move(loop)));
    assign(*s.target, items[k], sub);
    if (exec_body(s.body, sub, out) == Flow::Break) break;
  }
  return Flow::Normal;
}

namespace {
bool body_uses(const Body& body, const std::string& name);
bool expr_uses(const ExprPtr& e, const std::string& name) {
  if (!e) return false;
  if (e->kind == Expr::Kind::Name && e->name == name) return true;
  for (const auto& a : e->args)
    if (expr_uses(a, name)) return true;
  for (const auto& kv : e->kwargs)
    if (expr_uses(kv.second, name)) return true;
  return false;
}
bool body_uses(const Body& body, const std::string& name) {
  for (const auto& s : body) {
    if (expr_uses(s->expr, name) || expr_uses(s->cond, name) || body_uses(s->body, name) ||
        body_uses(s->else_body, name))
      return true;
    for (const auto& br : s->branches)
      if (expr_uses(br.first, name) || body_uses(br.second, name)) return true;
    for (const auto& f : s->filters)
      if (expr_uses(f, name)) return true;
    for (const auto& as : s->assigns)
      if (expr_uses(as.second, name)) return true;
    for (const auto& p : s->params)
      if (expr_uses(p.def, name)) return true;
  }
  return false;
}
}  // namespace

Value Interpreter::make_macro(const Stmt& s, const ScopePtr& scope, const Body* body,
                              const std::vector<MacroParam>* params, const std::string& name) {
  bool uses_varargs = body_uses(*body, "varargs");
  bool uses_kwargs = body_uses(*body, "kwargs");
  bool uses_caller = body_uses(*body, "caller");
  return Value::callable(name, [this, body, params, name, scope, uses_varargs, uses_kwargs, uses_caller](CallArgs& a) {
    if (call_depth_ >= kMaxCallDepth) throw Error("maximum recursion depth exceeded in macro '" + name + "'");
    auto sub = std::make_shared<Scope>();
    sub->parent = scope;
    const auto& ps = *params;
    if (a.pos.size() > ps.size() && !uses_varargs)
      throw Error("macro '" + name + "' takes not more than " + std::to_string(ps.size()) + " argument(s)");
    List varargs;
    for (size_t k = ps.size(); k < a.pos.size(); ++k) varargs.push_back(a.pos[k]);
    Dict kwargs;
    std::vector<const Value*> bound(ps.size(), nullptr);
    for (size_t k = 0; k < ps.size() && k < a.pos.size(); ++k) bound[k] = &a.pos[k];
    Value caller;
    for (const auto& kv : a.kw) {
      size_t k = 0;
      while (k < ps.size() && ps[k].name != kv.first) ++k;
      if (k < ps.size()) {
        if (bound[k]) throw Error("macro '" + name + "' got multiple values for argument '" + kv.first + "'");
        bound[k] = &kv.second;
      } else if (kv.first == "caller" && uses_caller) {
        caller = kv.second;
      } else if (uses_kwargs) {
        kwargs.set(kv.first, kv.second);
      } else {
        throw Error("macro '" + name + "' takes no keyword argument '" + kv.first + "'");
      }
    }
    ++call_depth_;
    struct Dec {
      int& d;
      ~Dec() { --d; }
    } dec{call_depth_};
    for (size_t k = 0; k < ps.size(); ++k) {
      if (bound[k]) sub->set(ps[k].name, *bound[k]);
      else if (ps[k].def) sub->set(ps[k].name, eval(*ps[k].def, sub));
      else sub->set(ps[k].name, Value::undefined("parameter '" + ps[k].name + "' was not provided"));
    }
    if (uses_varargs) sub->set("varargs", Value::make_tuple(std::move(varargs)));
    if (uses_kwargs) sub->set("kwargs", Value::make_dict(std::move(kwargs)));
    if (uses_caller && !caller.is_undefined()) sub->set("caller", caller);
    std::string out;
    exec_body(*body, sub, out);
    return Value::string(std::move(out));
  });
  (void)s;
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.type == Value::Type::Callable) return callee.fn->fn(args);
  if (callee.type == Value::Type::Dict) {
    const Value* c = callee.dict->find("__call__");
    if (c && c->type == Value::Type::Callable) return c->fn->fn(args);
  }
  require_defined(callee);
  throw Error("'" + callee.type_name() + "' object is not callable");
}

Value Interpreter::apply_filter(const std::string& name, const Value& subject, CallArgs& args) {
  return run_filter(*this, name, subject, args);
}

bool Interpreter::apply_test(const std::string& name, const Value& subject, CallArgs& args) {
  return run_test(*this, name, subject, args);
}

void Interpreter::eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out) {
  for (size_t k = first; k < e.args.size(); ++k) out.pos.push_back(eval(*e.args[k], scope));
  for (const auto& kv : e.kwargs) out.kw.emplace_back(kv.first, eval(*kv.second, scope));
}

Value Interpreter::eval(const Expr& e, const ScopePtr& scope) {
  try {
    return eval_inner(e, scope);
  } catch (const TemplateError&) {
    throw;
  } catch (const Error& err) {
    throw TemplateError("template error at " + where(e.offset) + ": " + err.what());
  }
}

Value Interpreter::eval_inner(const Expr& e, const ScopePtr& scope) {
  switch (e.kind) {
    case Expr::Kind::Const: return e.value;
    case Expr::Kind::Name: {
      const Value* v = scope->lookup(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::List: case Expr::Kind::Tuple: {
      List l;
      for (const auto& a : e.args) l.push_back(eval(*a, scope));
      return e.kind == Expr::Kind::List ? Value::make_list(std::move(l)) : Value::make_tuple(std::move(l));
    }
    case Expr::Kind::Dict: {
      Dict d;
      for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
        Value key = eval(*e.args[k], scope);
        if (!key.is_string()) throw Error("only string keys are supported in dict literals");
        d.set(key.s, eval(*e.args[k + 1], scope));
      }
      return Value::make_dict(std::move(d));
    }
    case Expr::Kind::GetAttr: return get_attr(eval(*e.args[0], scope), e.name);
    case Expr::Kind::GetItem: {
      Value obj = eval(*e.args[0], scope);
      return get_item(obj, eval(*e.args[1], scope));
    }
    case Expr::Kind::Slice: {
      Value obj = eval(*e.args[0], scope);
      auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k], scope) : Value::none(); };
      return slice(obj, part(1), part(2), part(3));
    }
    case Expr::Kind::Call: {
      Value callee = eval(*e.args[0], scope);
      CallArgs a;
      eval_args(e, 1, scope, a);
      return call(callee, a);
    }
    case Expr::Kind::Filter: {
      Value subject = eval(*e.args[0], scope);
      CallArgs a;
      eval_args(e, 1, scope, a);
      return apply_filter(e.name, subject, a);
    }
    case Expr::Kind::Test: {
      Value subject = eval(*e.args[0], scope);
      CallArgs a;
      eval_args(e, 1, scope, a);
      return Value::boolean(apply_test(e.name, subject, a) != e.negated);
    }
    case Expr::Kind::Unary: {
      Value v = eval(*e.args[0], scope);
      if (e.name == "not") return Value::boolean(!v.truthy());
      if (e.name == "-") return unary_minus(v);
      require_defined(v);
      if (!v.is_number()) throw Error("bad operand type for unary +: '" + v.type_name() + "'");
      return v.type == Value::Type::Bool ? Value::integer(v.as_int()) : v;
    }
    case Expr::Kind::Binary: {
      Value a = eval(*e.args[0], scope);
      if (e.name == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
      if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], scope);
      return binary_op(e.name, a, eval(*e.args[1], scope));
    }
    case Expr::Kind::Compare: {
      Value left = eval(*e.args[0], scope);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value right = eval(*e.args[k + 1], scope);
        const std::string& op = e.ops[k];
        bool r;
        if (op == "==") r = values_equal(left, right);
        else if (op == "!=") r = !values_equal(left, right);
        else if (op == "in") r = contains(right, left);
        else if (op == "not in") r = !contains(right, left);
        else {
          int c = values_compare(left, right);
          r = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
        }
        if (!r) return Value::boolean(false);
        left = std::move(right);
      }
      return Value::boolean(true);
    }
    case Expr::Kind::Cond:
      if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
      return e.args[2] ? eval(*e.args[2], scope) : Value::undefined("the inline if-expression evaluated to false and no else section was defined");
  }
  return Value();
}

}  // namespace lily::jinja
