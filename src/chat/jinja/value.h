// Runtime values of the Jinja renderer, modelled on the Python objects jinja2 works with: None, bool, int,
// float, str, list, tuple, dict (insertion-ordered, string keys), namespace, callables and jinja2's Undefined.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lily::jinja {

struct Value;
using List = std::vector<Value>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(const std::string& k) const;
  void set(const std::string& k, Value v);
};

// Arguments of a call: positional then keyword, in source order.
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::function<Value(CallArgs&)> fn;
};

struct Value {
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Tuple, Dict, Namespace, Callable };
  Type type = Type::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;                      // String; for Undefined: the message an error should carry
  std::shared_ptr<List> list;         // List, Tuple
  std::shared_ptr<Dict> dict;         // Dict, Namespace
  std::shared_ptr<Callable> fn;       // Callable

  Value() = default;
  static Value undefined(std::string why);
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value make_list(List v);
  static Value make_tuple(List v);
  static Value make_dict(Dict v = {});
  static Value make_namespace(Dict v = {});
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return type == Type::Undefined; }
  bool is_none() const { return type == Type::None; }
  bool is_string() const { return type == Type::String; }
  bool is_int() const { return type == Type::Int || type == Type::Bool; }  // Python: bool is an int
  bool is_number() const { return is_int() || type == Type::Float; }
  bool is_seq() const { return type == Type::List || type == Type::Tuple; }
  bool is_mapping() const { return type == Type::Dict || type == Type::Namespace; }
  int64_t as_int() const { return type == Type::Bool ? (b ? 1 : 0) : i; }
  double as_double() const { return type == Type::Float ? f : static_cast<double>(as_int()); }

  bool truthy() const;
  std::string type_name() const;  // Python's type name: 'str', 'dict', ...
};

// Python str(v) (what {{ v }} prints; Undefined prints as empty) and repr(v).
std::string to_str(const Value& v);
std::string to_repr(const Value& v);
std::string float_repr(double d);
// json.dumps(v, ensure_ascii, indent (<0: none; or indent_str), separators, sort_keys); throws on non-JSON values.
struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  bool has_separators = false;
  std::string item_sep, key_sep;
  bool sort_keys = false;
};
std::string to_json(const Value& v, const JsonOptions& o);

// Python ==, and ordering (< > <= >=); compare throws a lily::Error-ready message on unorderable types.
bool values_equal(const Value& a, const Value& b);
int values_compare(const Value& a, const Value& b);  // -1, 0, 1

// UTF-8 helpers: Python strings are code point sequences.
std::vector<char32_t> utf8_decode(const std::string& s);
std::string utf8_encode(const std::vector<char32_t>& cps);
void utf8_append(std::string& out, char32_t c);
size_t utf8_length(const std::string& s);
bool is_py_space(char32_t c);

}  // namespace lily::jinja
