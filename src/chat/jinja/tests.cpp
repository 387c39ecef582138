// Built-in tests (`x is defined`, `x is divisibleby 3`, ...), following jinja2 3.1's definitions.
#include "chat/jinja/eval.h"
#include "chat/jinja/ops.h"
#include "chat/jinja/strings.h"

namespace lily::jinja {

bool run_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  auto arg = [&](const char* what) -> Value {
    ArgReader r(a, name.c_str(), {what});
    if (!r.has(0)) throw Error(name + "() missing required argument '" + what + "'");
    return r.get(0);
  };
  auto none_args = [&] { ArgReader r(a, name.c_str(), {}); };
  if (name == "defined") { none_args(); return !v.is_undefined(); }
  if (name == "undefined") { none_args(); return v.is_undefined(); }
  if (name == "none") { none_args(); return v.is_none(); }
  if (name == "boolean") { none_args(); return v.type == Value::Type::Bool; }
  if (name == "true") { none_args(); return v.type == Value::Type::Bool && v.b; }
  if (name == "false") { none_args(); return v.type == Value::Type::Bool && !v.b; }
  if (name == "string") { none_args(); return v.is_string(); }
  if (name == "number") { none_args(); return v.is_number(); }
  if (name == "integer") { none_args(); return v.type == Value::Type::Int; }
  if (name == "float") { none_args(); return v.type == Value::Type::Float; }
  if (name == "mapping") { none_args(); return v.type == Value::Type::Dict; }
  if (name == "iterable") {
    none_args();
    return v.is_undefined() || v.is_string() || v.is_seq() || v.type == Value::Type::Dict;
  }
  if (name == "sequence") {
    none_args();
    return v.is_undefined() || v.is_string() || v.is_seq() || v.type == Value::Type::Dict;
  }
  if (name == "callable") {
    none_args();
    return v.type == Value::Type::Callable;
  }
  if (name == "odd" || name == "even") {
    none_args();
    Value m = binary_op("%", v, Value::integer(2));
    return values_equal(m, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") return values_equal(binary_op("%", v, arg("num")), Value::integer(0));
  if (name == "eq" || name == "equalto" || name == "==") return values_equal(v, arg("other"));
  if (name == "ne" || name == "!=") return !values_equal(v, arg("other"));
  if (name == "lt" || name == "lessthan" || name == "<") return values_compare(v, arg("other")) < 0;
  if (name == "le" || name == "<=") return values_compare(v, arg("other")) <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return values_compare(v, arg("other")) > 0;
  if (name == "ge" || name == ">=") return values_compare(v, arg("other")) >= 0;
  if (name == "in") return contains(arg("seq"), v);
  if (name == "sameas") {
    Value o = arg("other");
    if (v.type != o.type) return false;
    switch (v.type) {
      case Value::Type::List: case Value::Type::Tuple: return v.list == o.list;
      case Value::Type::Dict: case Value::Type::Namespace: return v.dict == o.dict;
      case Value::Type::Callable: return v.fn == o.fn;
      default: return values_equal(v, o);
    }
  }
  if (name == "lower" || name == "upper") {
    none_args();
    if (!v.is_string()) return false;
    return name == "lower" ? py_lower(v.s) == v.s : py_upper(v.s) == v.s;
  }
  if (name == "escaped") { none_args(); return false; }
  if (name == "filter" || name == "test") {
    Value n = arg("name");
    static const char* filters[] = {"tojson", "default", "d", "safe", "length", "count", "string", "list", "items", "trim",
                                    "upper", "lower", "capitalize", "title", "replace", "join", "first", "last", "reverse",
                                    "abs", "int", "float", "round", "indent", "escape", "e", "forceescape", "wordcount",
                                    "center", "format", "attr", "batch", "map", "select", "reject", "selectattr",
                                    "rejectattr", "unique", "sort", "min", "max", "sum", "dictsort", "pprint"};
    static const char* tests[] = {"defined", "undefined", "none", "boolean", "true", "false", "string", "number", "integer",
                                  "float", "mapping", "iterable", "sequence", "callable", "odd", "even", "divisibleby",
                                  "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
                                  "greaterthan", ">", "ge", ">=", "in", "sameas", "lower", "upper", "escaped", "filter", "test"};
    if (!n.is_string()) return false;
    if (name == "filter") {
      for (const char* f : filters) if (n.s == f) return true;
    } else {
      for (const char* t : tests) if (n.s == t) return true;
    }
    return false;
  }
  (void)in;
  throw Error("No test named '" + name + "'.");
}

}  // namespace lily::jinja
