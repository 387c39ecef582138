// Operators, access, slicing and iteration with Python's rules (int/float arithmetic, floor division and
// modulo signs, str/list repetition and concatenation, negative indices).
#include "chat/jinja/ops.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "core/error.h"

namespace lily::jinja {

void require_defined(const Value& v) {
  if (v.is_undefined()) throw Error(v.s.empty() ? "value is undefined" : v.s);
}

int64_t to_index(const Value& v, const char* what) {
  require_defined(v);
  if (!v.is_int()) throw Error(std::string(what) + " must be an integer, not '" + v.type_name() + "'");
  return v.as_int();
}

namespace {

[[noreturn]] void bad_operands(const std::string& op, const Value& a, const Value& b) {
  throw Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value checked(int64_t x, bool overflow) {
  if (overflow) throw Error("integer overflow (values beyond 64 bits are not supported)");
  return Value::integer(x);
}

Value repeat(const Value& seq, int64_t n) {
  if (n < 0) n = 0;
  if (seq.is_string()) {
    if (seq.s.size() * static_cast<size_t>(n) > kMaxSequence) throw Error("string repetition too large");
    std::string out;
    for (int64_t k = 0; k < n; ++k) out += seq.s;
    return Value::string(std::move(out));
  }
  if (seq.list->size() * static_cast<size_t>(n) > kMaxSequence) throw Error("list repetition too large");
  List out;
  for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
  return seq.type == Value::Type::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value::string(to_str(a) + to_str(b));
  require_defined(a);
  require_defined(b);
  bool ints = a.is_int() && b.is_int();
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) { int64_t r; bool o = __builtin_add_overflow(a.as_int(), b.as_int(), &r); return checked(r, o); }
    if (nums) return Value::number(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value::string(a.s + b.s);
    if (a.is_seq() && a.type == b.type) {
      List out = *a.list;
      out.insert(out.end(), b.list->begin(), b.list->end());
      return a.type == Value::Type::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
    }
    if (a.is_string() || b.is_string())
      throw Error("can only concatenate str (not \"" + (a.is_string() ? b : a).type_name() + "\") to str");
    bad_operands("+", a, b);
  }
  if (op == "-") {
    if (ints) { int64_t r; bool o = __builtin_sub_overflow(a.as_int(), b.as_int(), &r); return checked(r, o); }
    if (nums) return Value::number(a.as_double() - b.as_double());
    bad_operands("-", a, b);
  }
  if (op == "*") {
    if (ints) { int64_t r; bool o = __builtin_mul_overflow(a.as_int(), b.as_int(), &r); return checked(r, o); }
    if (nums) return Value::number(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_seq()) && b.is_int()) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_seq()) && a.is_int()) return repeat(b, a.as_int());
    bad_operands("*", a, b);
  }
  if (op == "/") {
    if (!nums) bad_operands("/", a, b);
    if (b.as_double() == 0) throw Error(ints ? "division by zero" : "float division by zero");
    return Value::number(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      // printf-style formatting: %s %r %d %i %f %%
      List args = b.type == Value::Type::Tuple ? *b.list : List{b};
      std::string out;
      size_t ai = 0;
      for (size_t k = 0; k < a.s.size(); ++k) {
        if (a.s[k] != '%') { out += a.s[k]; continue; }
        if (++k >= a.s.size()) throw Error("incomplete format");
        char c = a.s[k];
        if (c == '%') { out += '%'; continue; }
        if (ai >= args.size()) throw Error("not enough arguments for format string");
        const Value& v = args[ai++];
        if (c == 's') out += to_str(v);
        else if (c == 'r') out += to_repr(v);
        else if (c == 'd' || c == 'i') {
          if (!v.is_number()) throw Error("%d format: a real number is required, not " + v.type_name());
          out += std::to_string(v.type == Value::Type::Float ? static_cast<int64_t>(v.f) : v.as_int());
        } else if (c == 'f') {
          if (!v.is_number()) throw Error("%f format: a real number is required, not " + v.type_name());
          char buf[64];
          std::snprintf(buf, sizeof buf, "%f", v.as_double());
          out += buf;
        } else {
          throw Error(std::string("unsupported format character '") + c + "'");
        }
      }
      if (ai < args.size()) throw Error("not all arguments converted during string formatting");
      return Value::string(std::move(out));
    }
    if (!nums) bad_operands(op, a, b);
    if (b.as_double() == 0) throw Error(ints ? "integer division or modulo by zero" : "float modulo");
    if (ints) {
      int64_t x = a.as_int(), y = b.as_int();
      if (x == std::numeric_limits<int64_t>::min() && y == -1) throw Error("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) { --q; r += y; }
      return Value::integer(op == "//" ? q : r);
    }
    double x = a.as_double(), y = b.as_double();
    if (op == "%") return Value::number(py_fmod(x, y));
    return Value::number(std::floor((x - py_fmod(x, y)) / y + 0.5));
  }
  if (op == "**") {
    if (ints && b.as_int() >= 0) {
      int64_t base = a.as_int(), e = b.as_int(), r = 1;
      while (e-- > 0)
        if (__builtin_mul_overflow(r, base, &r)) throw Error("integer overflow (values beyond 64 bits are not supported)");
      return Value::integer(r);
    }
    if (nums) return Value::number(std::pow(a.as_double(), b.as_double()));
    bad_operands("** or pow()", a, b);
  }
  throw Error("unknown operator " + op);
}

Value unary_minus(const Value& a) {
  require_defined(a);
  if (a.is_int()) {
    if (a.as_int() == std::numeric_limits<int64_t>::min()) throw Error("integer overflow");
    return Value::integer(-a.as_int());
  }
  if (a.type == Value::Type::Float) return Value::number(-a.f);
  throw Error("bad operand type for unary -: '" + a.type_name() + "'");
}

bool contains(const Value& c, const Value& item) {
  switch (c.type) {
    case Value::Type::Undefined: return false;
    case Value::Type::String:
      if (!item.is_string()) throw Error("'in <string>' requires string as left operand, not " + item.type_name());
      return c.s.find(item.s) != std::string::npos;
    case Value::Type::List: case Value::Type::Tuple:
      for (const auto& e : *c.list)
        if (values_equal(e, item)) return true;
      return false;
    case Value::Type::Dict: case Value::Type::Namespace:
      return item.is_string() && c.dict->find(item.s) != nullptr;
    default:
      throw Error("argument of type '" + c.type_name() + "' is not iterable");
  }
}

static Value missing_attr(const Value& obj, const std::string& name) {
  return Value::undefined(std::string("'") + (obj.type == Value::Type::Dict ? std::string("dict object") : obj.type_name() + " object") +
                          "' has no attribute '" + name + "'");
}

Value get_attr(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (!name.empty() && name[0] == '_') return missing_attr(obj, name);  // the sandbox hides private attributes
  if (obj.type == Value::Type::Namespace) {
    const Value* v = obj.dict->find(name);
    return v ? *v : missing_attr(obj, name);
  }
  Value m = bound_method(obj, name);
  if (!m.is_undefined()) return m;
  if (obj.type == Value::Type::Dict) {
    const Value* v = obj.dict->find(name);
    if (v) return *v;
  }
  return missing_attr(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_mapping()) {
    if (key.is_string()) {
      const Value* v = obj.dict->find(key.s);
      if (v) return *v;
      if (obj.type == Value::Type::Dict) {
        Value m = key.s.empty() || key.s[0] == '_' ? Value() : bound_method(obj, key.s);
        if (!m.is_undefined()) return m;
      }
    }
    return Value::undefined(std::string("'") + std::string(obj.type == Value::Type::Dict ? "dict object" : "Namespace object") +
                            "' has no attribute '" + to_str(key) + "'");
  }
  if ((obj.is_seq() || obj.is_string()) && key.is_int()) {
    int64_t n = obj.is_string() ? static_cast<int64_t>(utf8_length(obj.s)) : static_cast<int64_t>(obj.list->size());
    int64_t k = key.as_int();
    if (k < 0) k += n;
    if (k < 0 || k >= n)
      return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + std::to_string(key.as_int()) + "'");
    if (obj.is_string()) {
      auto cps = utf8_decode(obj.s);
      return Value::string(utf8_encode({cps[static_cast<size_t>(k)]}));
    }
    return (*obj.list)[static_cast<size_t>(k)];
  }
  if (key.is_string()) return get_attr(obj, key.s);
  return Value::undefined(std::string("'") + obj.type_name() + " object' has no attribute '" + to_str(key) + "'");
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  if (!obj.is_string() && !obj.is_seq()) throw Error("'" + obj.type_name() + "' object is not subscriptable");
  std::vector<char32_t> cps;
  if (obj.is_string()) cps = utf8_decode(obj.s);
  int64_t n = obj.is_string() ? static_cast<int64_t>(cps.size()) : static_cast<int64_t>(obj.list->size());
  auto opt = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    return to_index(v, what);
  };
  auto st = opt(step, "slice step");
  int64_t s = st.value_or(1);
  if (s == 0) throw Error("slice step cannot be zero");
  auto norm = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = s < 0 ? -1 : 0;
    } else if (x >= n) {
      x = s < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t b = norm(opt(start, "slice index"), s < 0 ? n - 1 : 0);
  int64_t e = norm(opt(stop, "slice index"), s < 0 ? -1 : n);
  std::vector<size_t> idx;
  for (int64_t k = b; s > 0 ? k < e : k > e; k += s) idx.push_back(static_cast<size_t>(k));
  if (obj.is_string()) {
    std::string out;
    for (size_t k : idx) utf8_append(out, cps[k]);
    return Value::string(std::move(out));
  }
  List out;
  for (size_t k : idx) out.push_back((*obj.list)[k]);
  return obj.type == Value::Type::Tuple ? Value::make_tuple(std::move(out)) : Value::make_list(std::move(out));
}

List iterate(const Value& v) {
  switch (v.type) {
    case Value::Type::Undefined: return {};
    case Value::Type::List: case Value::Type::Tuple: return *v.list;
    case Value::Type::Dict: {
      List out;
      for (const auto& kv : v.dict->items) out.push_back(Value::string(kv.first));
      return out;
    }
    case Value::Type::String: {
      List out;
      for (char32_t c : utf8_decode(v.s)) out.push_back(Value::string(utf8_encode({c})));
      return out;
    }
    default: throw Error("'" + v.type_name() + "' object is not iterable");
  }
}

}  // namespace lily::jinja
