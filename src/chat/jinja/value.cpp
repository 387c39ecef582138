// Value construction, truthiness, Python-style str()/repr(), json.dumps, equality and ordering.
#include "chat/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace lily::jinja {

const Value* Dict::find(const std::string& k) const {
  for (const auto& kv : items)
    if (kv.first == k) return &kv.second;
  return nullptr;
}

void Dict::set(const std::string& k, Value v) {
  for (auto& kv : items)
    if (kv.first == k) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(k, std::move(v));
}

Value Value::undefined(std::string why) { Value v; v.s = std::move(why); return v; }
Value Value::none() { Value v; v.type = Type::None; return v; }
Value Value::boolean(bool x) { Value v; v.type = Type::Bool; v.b = x; return v; }
Value Value::integer(int64_t x) { Value v; v.type = Type::Int; v.i = x; return v; }
Value Value::number(double x) { Value v; v.type = Type::Float; v.f = x; return v; }
Value Value::string(std::string x) { Value v; v.type = Type::String; v.s = std::move(x); return v; }
Value Value::make_list(List x) {
  Value v; v.type = Type::List; v.list = std::make_shared<List>(std::move(x)); return v;
}
Value Value::make_tuple(List x) {
  Value v; v.type = Type::Tuple; v.list = std::make_shared<List>(std::move(x)); return v;
}
Value Value::make_dict(Dict x) {
  Value v; v.type = Type::Dict; v.dict = std::make_shared<Dict>(std::move(x)); return v;
}
Value Value::make_namespace(Dict x) {
  Value v; v.type = Type::Namespace; v.dict = std::make_shared<Dict>(std::move(x)); return v;
}
Value Value::callable(std::string name, std::function<Value(CallArgs&)> f) {
  Value v; v.type = Type::Callable; v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(f)}); return v;
}

namespace {

// Deepest JSON nesting converted; deeper input is refused rather than recursed into (the server bounds
// client JSON far below this, so only a caller passing unchecked JSON can reach it).
constexpr int kMaxFromJsonDepth = 256;

Value from_json_at(const nlohmann::ordered_json& j, int depth) {
  using T = nlohmann::ordered_json::value_t;
  if ((j.type() == T::array || j.type() == T::object) && depth >= kMaxFromJsonDepth)
    throw Error("template variables nest arrays/objects deeper than " + std::to_string(kMaxFromJsonDepth) +
                " levels");
  switch (j.type()) {
    case T::null: return Value::none();
    case T::boolean: return Value::boolean(j.get<bool>());
    case T::number_integer: return Value::integer(j.get<int64_t>());
    case T::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case T::number_float: return Value::number(j.get<double>());
    case T::string: return Value::string(j.get<std::string>());
    case T::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json_at(e, depth + 1));
      return Value::make_list(std::move(l));
    }
    case T::object: {
      Dict d;
      d.items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.items.emplace_back(it.key(), from_json_at(it.value(), depth + 1));
      return Value::make_dict(std::move(d));
    }
    default: return Value::none();
  }
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& j) { return from_json_at(j, 0); }

bool Value::truthy() const {
  switch (type) {
    case Type::Undefined: case Type::None: return false;
    case Type::Bool: return b;
    case Type::Int: return i != 0;
    case Type::Float: return f != 0;
    case Type::String: return !s.empty();
    case Type::List: case Type::Tuple: return !list->empty();
    case Type::Dict: return !dict->items.empty();
    default: return true;
  }
}

std::string Value::type_name() const {
  switch (type) {
    case Type::Undefined: return "Undefined";
    case Type::None: return "NoneType";
    case Type::Bool: return "bool";
    case Type::Int: return "int";
    case Type::Float: return "float";
    case Type::String: return "str";
    case Type::List: return "list";
    case Type::Tuple: return "tuple";
    case Type::Dict: return "dict";
    case Type::Namespace: return "Namespace";
    default: return "function";
  }
}

// ---- UTF-8 ----

std::vector<char32_t> utf8_decode(const std::string& s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += n;
  }
  return out;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

std::string utf8_encode(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

bool is_py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// ---- printing ----

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // like "-1.2345e+02"
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; ++k)
    if (sci[k] != '.') digits += sci[k];
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    size_t ip = static_cast<size_t>(exp) + 1;
    if (digits.size() <= ip) out = digits + std::string(ip - digits.size(), '0') + ".0";
    else out = digits.substr(0, ip) + "." + digits.substr(ip);
  }
  return neg ? "-" + out : out;
}

static bool py_printable(char32_t c) {
  if (c < 0x20 || c == 0x7f) return false;
  if (c >= 0x80 && c <= 0xa0) return false;
  if (c == 0xad || (c >= 0x2028 && c <= 0x202e) || (c >= 0x2060 && c <= 0x206f)) return false;
  if (c >= 0xd800 && c <= 0xdfff) return false;
  if (c == 0xfeff || (c >= 0xe000 && c <= 0xf8ff) || c >= 0xf0000) return false;
  if (c >= 0x2000 && c <= 0x200f) return false;
  return c != 0x3000 && c != 0x1680 && c != 0x205f;
}

static std::string str_repr(const std::string& s) {
  bool sq = s.find('\'') != std::string::npos, dq = s.find('"') != std::string::npos;
  char q = (sq && !dq) ? '"' : '\'';
  std::string out(1, q);
  for (char32_t c : utf8_decode(s)) {
    if (c == static_cast<char32_t>(q) || c == '\\') { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (!py_printable(c)) {
      char b[16];
      if (c < 0x100) std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      else if (c < 0x10000) std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      else std::snprintf(b, sizeof b, "\\U%08x", static_cast<unsigned>(c));
      out += b;
    } else utf8_append(out, c);
  }
  out += q;
  return out;
}

std::string to_repr(const Value& v) {
  switch (v.type) {
    case Value::Type::Undefined: return "";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.b ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.i);
    case Value::Type::Float: return float_repr(v.f);
    case Value::Type::String: return str_repr(v.s);
    case Value::Type::List: case Value::Type::Tuple: {
      bool tup = v.type == Value::Type::Tuple;
      std::string out = tup ? "(" : "[";
      for (size_t k = 0; k < v.list->size(); ++k) out += (k ? ", " : "") + to_repr((*v.list)[k]);
      if (tup && v.list->size() == 1) out += ",";
      return out + (tup ? ")" : "]");
    }
    case Value::Type::Dict: case Value::Type::Namespace: {
      std::string out = v.type == Value::Type::Namespace ? "<Namespace {" : "{";
      bool first = true;
      for (const auto& kv : v.dict->items) {
        out += (first ? "" : ", ") + str_repr(kv.first) + ": " + to_repr(kv.second);
        first = false;
      }
      return out + (v.type == Value::Type::Namespace ? "}>" : "}");
    }
    default: return "<function " + v.fn->name + ">";
  }
}

std::string to_str(const Value& v) {
  if (v.type == Value::Type::String) return v.s;
  return to_repr(v);
}

static void json_string(std::string& out, const std::string& s, bool ascii) {
  out += '"';
  for (char32_t c : utf8_decode(s)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default: {
        char b[16];
        if (c < 0x20 || (ascii && c > 0x7e)) {
          if (c >= 0x10000) {
            unsigned x = static_cast<unsigned>(c) - 0x10000;
            std::snprintf(b, sizeof b, "\\u%04x\\u%04x", 0xd800 + (x >> 10), 0xdc00 + (x & 0x3ff));
          } else {
            std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
          }
          out += b;
        } else {
          utf8_append(out, c);
        }
      }
    }
  }
  out += '"';
}

static void json_dump(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  if (depth > 500) throw Error("tojson: nesting too deep");
  std::string item_sep = o.has_separators ? o.item_sep : (o.has_indent ? "," : ", ");
  std::string key_sep = o.has_separators ? o.key_sep : ": ";
  auto newline = [&](int d) {
    out += '\n';
    for (int k = 0; k < d; ++k) out += o.indent;
  };
  switch (v.type) {
    case Value::Type::None: out += "null"; return;
    case Value::Type::Bool: out += v.b ? "true" : "false"; return;
    case Value::Type::Int: out += std::to_string(v.i); return;
    case Value::Type::Float:
      if (std::isnan(v.f)) out += "NaN";
      else if (std::isinf(v.f)) out += v.f > 0 ? "Infinity" : "-Infinity";
      else out += float_repr(v.f);
      return;
    case Value::Type::String: json_string(out, v.s, o.ensure_ascii); return;
    case Value::Type::List: case Value::Type::Tuple: {
      if (v.list->empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < v.list->size(); ++k) {
        if (k) out += item_sep;
        if (o.has_indent) newline(depth + 1);
        json_dump(out, (*v.list)[k], o, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out += ']';
      return;
    }
    case Value::Type::Dict: {
      if (v.dict->items.empty()) { out += "{}"; return; }
      std::vector<const std::pair<std::string, Value>*> items;
      for (const auto& kv : v.dict->items) items.push_back(&kv);
      if (o.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
      out += '{';
      bool first = true;
      for (auto* kv : items) {
        if (!first) out += item_sep;
        first = false;
        if (o.has_indent) newline(depth + 1);
        json_string(out, kv->first, o.ensure_ascii);
        out += key_sep;
        json_dump(out, kv->second, o, depth + 1);
      }
      if (o.has_indent) newline(depth);
      out += '}';
      return;
    }
    default:
      throw Error("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

std::string to_json(const Value& v, const JsonOptions& o) {
  std::string out;
  json_dump(out, v, o, 0);
  return out;
}

// ---- comparison ----

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::Float || b.type == Value::Type::Float) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.is_seq() && b.is_seq()) {
    if (a.type != b.type || a.list->size() != b.list->size()) return false;
    for (size_t k = 0; k < a.list->size(); ++k)
      if (!values_equal((*a.list)[k], (*b.list)[k])) return false;
    return true;
  }
  if (a.type != b.type) return false;
  switch (a.type) {
    case Value::Type::Undefined: case Value::Type::None: return true;
    case Value::Type::String: return a.s == b.s;
    case Value::Type::Dict: {
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& kv : a.dict->items) {
        const Value* o = b.dict->find(kv.first);
        if (!o || !values_equal(kv.second, *o)) return false;
      }
      return true;
    }
    case Value::Type::Namespace: return a.dict == b.dict;
    case Value::Type::Callable: return a.fn == b.fn;
    default: return false;
  }
}

int values_compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type == Value::Type::Float || b.type == Value::Type::Float) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.s.compare(b.s);  // UTF-8 byte order equals code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_seq() && b.type == a.type) {
    size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k)
      if (!values_equal((*a.list)[k], (*b.list)[k])) return values_compare((*a.list)[k], (*b.list)[k]);
    return a.list->size() < b.list->size() ? -1 : a.list->size() > b.list->size() ? 1 : 0;
  }
  if (a.is_undefined() || b.is_undefined()) throw Error(a.is_undefined() ? a.s : b.s);
  throw Error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

}  // namespace lily::jinja
