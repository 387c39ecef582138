// Tree-walking evaluator: scopes (jinja2's rules: for bodies and macros get their own scope, if does not),
// statements, expressions, macros and call blocks, with recursion, iteration and output limits.
#pragma once
#include <memory>
#include <string>

#include "chat/jinja/ast.h"
#include "chat/jinja/lexer.h"
#include "core/error.h"

namespace lily::jinja {

// An error that already names its position (or is a template's own raise_exception message): passed through.
struct TemplateError : Error {
  using Error::Error;
};

struct Scope;
using ScopePtr = std::shared_ptr<Scope>;
struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  ScopePtr parent;
  const Value* lookup(const std::string& name) const;
  void set(const std::string& name, Value v);
};

class Interpreter {
 public:
  explicit Interpreter(std::shared_ptr<const Program> prog);
  // Renders with `globals` (context variables and global functions) as the outermost scope.
  std::string render(const Dict& globals);

  // For filters/tests that take a filter or test name (map, select, ...): apply by name.
  Value apply_filter(const std::string& name, const Value& subject, CallArgs& args);
  bool apply_test(const std::string& name, const Value& subject, CallArgs& args);
  Value call(const Value& callee, CallArgs& args);

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& s, const ScopePtr& scope, std::string& out);
  Flow exec_for(const Stmt& s, const ScopePtr& scope, std::string& out, const Value& iterable, int depth);
  void assign(const Expr& target, const Value& v, const ScopePtr& scope);
  Value make_macro(const Stmt& s, const ScopePtr& scope, const Body* body, const std::vector<MacroParam>* params,
                   const std::string& name);
  Value eval(const Expr& e, const ScopePtr& scope);
  Value eval_inner(const Expr& e, const ScopePtr& scope);
  void eval_args(const Expr& e, size_t first, const ScopePtr& scope, CallArgs& out);
  std::string where(size_t offset) const { return map_.where(offset); }
  void emit(std::string& out, const std::string& s);

  std::shared_ptr<const Program> prog_;
  SourceMap map_;
  int call_depth_ = 0;
  size_t iterations_ = 0;
  std::vector<ScopePtr> macro_scopes_;
};

constexpr int kMaxCallDepth = 100;
constexpr size_t kMaxIterations = 1'000'000;
constexpr size_t kMaxOutput = 64u << 20;

// filters.cpp / tests.cpp
Value run_filter(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);
bool run_test(Interpreter& in, const std::string& name, const Value& subject, CallArgs& args);
// globals.cpp: range, dict, namespace, raise_exception, strftime_now, cycler, joiner, lipsum-free set.
void add_builtin_globals(Dict& globals);

// Argument helper: positional index `pos` or keyword `name`, else `def`. Throws on unknown keywords via check().
struct ArgReader {
  CallArgs& a;
  const char* fn;
  std::vector<std::string> names;
  ArgReader(CallArgs& args, const char* function, std::vector<std::string> allowed);
  Value get(size_t pos, const Value& def = Value()) const;
  bool has(size_t pos) const;
};

}  // namespace lily::jinja
