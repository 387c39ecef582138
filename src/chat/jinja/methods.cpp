// Methods callable on values: Python str methods, dict items/keys/values/get, list index/count. Mutating
// methods are refused, as in transformers' ImmutableSandboxedEnvironment.
#include <algorithm>
#include <cctype>
#include <set>

#include "chat/jinja/eval.h"
#include "chat/jinja/ops.h"
#include "chat/jinja/strings.h"

namespace lily::jinja {

namespace {

std::string need_str(const Value& v, const char* what) {
  require_defined(v);
  if (!v.is_string()) throw Error(std::string(what) + " must be str, not " + v.type_name());
  return v.s;
}

// Optional str argument: null for None/absent.
const std::string* opt_str(const Value& v, std::string& holder, const char* what) {
  if (v.is_undefined() || v.is_none()) return nullptr;
  holder = need_str(v, what);
  return &holder;
}

// Python's s[start:end] for the start/end arguments of find/count/startswith.
std::string sub_range(const std::string& s, const ArgReader& r, size_t start_pos) {
  if (!r.has(start_pos) && !r.has(start_pos + 1)) return s;
  return slice(Value::string(s), r.get(start_pos, Value::none()), r.get(start_pos + 1, Value::none()), Value::none()).s;
}

Value list_of_strings(const std::vector<std::string>& v) {
  List l;
  for (const auto& s : v) l.push_back(Value::string(s));
  return Value::make_list(std::move(l));
}

std::string str_format(const std::string& fmt, CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); ++k) {
    char c = fmt[k];
    if (c == '{' && k + 1 < fmt.size() && fmt[k + 1] == '{') { out += '{'; ++k; continue; }
    if (c == '}' && k + 1 < fmt.size() && fmt[k + 1] == '}') { out += '}'; ++k; continue; }
    if (c == '}') throw Error("Single '}' encountered in format string");
    if (c != '{') { out += c; continue; }
    size_t e = fmt.find('}', k);
    if (e == std::string::npos) throw Error("Single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, e - k - 1);
    k = e;
    bool repr = false;
    if (field.size() >= 2 && field[field.size() - 2] == '!') {
      repr = field.back() == 'r';
      field.resize(field.size() - 2);
    }
    if (field.find(':') != std::string::npos) throw Error("format specifications are not supported in str.format");
    const Value* v = nullptr;
    if (field.empty()) {
      if (auto_idx >= a.pos.size()) throw Error("Replacement index " + std::to_string(auto_idx) + " out of range");
      v = &a.pos[auto_idx++];
    } else if (std::isdigit(static_cast<unsigned char>(field[0]))) {
      size_t i = std::stoul(field);
      if (i >= a.pos.size()) throw Error("Replacement index " + field + " out of range");
      v = &a.pos[i];
    } else {
      for (const auto& kv : a.kw)
        if (kv.first == field) v = &kv.second;
      if (!v) throw Error("KeyError: '" + field + "'");
    }
    out += repr ? to_repr(*v) : to_str(*v);
  }
  return out;
}

bool prefix_match(const Value& arg, const std::string& s, bool suffix) {
  auto one = [&](const Value& p) {
    std::string x = need_str(p, suffix ? "endswith argument" : "startswith argument");
    if (x.size() > s.size()) return false;
    return suffix ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (arg.type == Value::Type::Tuple) {
    for (const auto& p : *arg.list)
      if (one(p)) return true;
    return false;
  }
  return one(arg);
}

template <typename Pred>
bool all_chars(const std::string& s, Pred pred) {
  auto cps = utf8_decode(s);
  if (cps.empty()) return false;
  for (char32_t c : cps)
    if (!pred(c)) return false;
  return true;
}

Value string_method(const Value& self, const std::string& name) {
  const std::string s = self.s;
  auto M = [&](auto fn) { return Value::callable("str." + name, fn); };
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"chars"});
      std::string h;
      const std::string* chars = opt_str(r.get(0), h, "chars");
      return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"));
    });
  if (name == "split" || name == "rsplit")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"sep", "maxsplit"});
      std::string h;
      const std::string* sep = opt_str(r.get(0), h, "sep");
      if (sep && sep->empty()) throw Error("empty separator");
      long maxsplit = r.has(1) ? static_cast<long>(to_index(r.get(1), "maxsplit")) : -1;
      return list_of_strings(name == "split" ? py_split(s, sep, maxsplit) : py_rsplit(s, sep, maxsplit));
    });
  if (name == "splitlines")
    return M([s](CallArgs& a) {
      ArgReader r(a, "splitlines", {"keepends"});
      return list_of_strings(py_splitlines(s, r.get(0, Value::boolean(false)).truthy()));
    });
  if (name == "startswith" || name == "endswith")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"prefix", "start", "end"});
      if (!r.has(0)) throw Error(name + "() takes at least 1 argument (0 given)");
      return Value::boolean(prefix_match(r.get(0), sub_range(s, r, 1), name == "endswith"));
    });
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {});
      if (name == "upper") return Value::string(py_upper(s));
      if (name == "title") return Value::string(py_title(s));
      if (name == "capitalize") return Value::string(py_capitalize(s));
      if (name == "swapcase") return Value::string(py_swapcase(s));
      return Value::string(py_lower(s));
    });
  if (name == "replace")
    return M([s](CallArgs& a) {
      ArgReader r(a, "replace", {"old", "new", "count"});
      long count = r.has(2) ? static_cast<long>(to_index(r.get(2), "count")) : -1;
      return Value::string(py_replace(s, need_str(r.get(0), "replace() argument 1"), need_str(r.get(1), "replace() argument 2"), count));
    });
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"sub", "start", "end"});
      std::string sub = need_str(r.get(0), "argument");
      std::string hay = sub_range(s, r, 1);
      long offset = 0;
      if (r.has(1) && !r.get(1).is_none()) {
        long n = static_cast<long>(utf8_length(s)), k = static_cast<long>(to_index(r.get(1), "start"));
        offset = k < 0 ? std::max(0L, k + n) : std::min(k, n);
      }
      if (name == "count") return Value::integer(py_count(hay, sub));
      size_t f = (name == "find" || name == "index") ? hay.find(sub) : hay.rfind(sub);
      if (f == std::string::npos) {
        if (name == "index" || name == "rindex") throw Error("substring not found");
        return Value::integer(-1);
      }
      return Value::integer(offset + cp_index(hay, f));
    });
  if (name == "join")
    return M([s](CallArgs& a) {
      ArgReader r(a, "join", {"iterable"});
      std::string out;
      bool first = true;
      for (const auto& v : iterate(r.get(0))) {
        if (!v.is_string()) throw Error("sequence item: expected str instance, " + v.type_name() + " found");
        if (!first) out += s;
        out += v.s;
        first = false;
      }
      return Value::string(std::move(out));
    });
  if (name == "format") return M([s](CallArgs& a) { return Value::string(str_format(s, a)); });
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "islower" ||
      name == "isupper" || name == "isnumeric" || name == "isdecimal")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {});
      if (name == "isdigit" || name == "isnumeric" || name == "isdecimal") return Value::boolean(all_chars(s, cp_is_digit));
      if (name == "isalpha") return Value::boolean(all_chars(s, cp_is_alpha));
      if (name == "isalnum") return Value::boolean(all_chars(s, cp_is_alnum));
      if (name == "isspace") return Value::boolean(all_chars(s, is_py_space));
      bool any_cased = false, ok = true;
      for (char32_t c : utf8_decode(s)) {
        bool up = cp_is_upper(c), lo = cp_is_lower(c);
        any_cased = any_cased || up || lo;
        if (name == "islower" ? up : lo) ok = false;
      }
      return Value::boolean(ok && any_cased);
    });
  if (name == "center" || name == "ljust" || name == "rjust" || name == "zfill")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"width", "fillchar"});
      int64_t width = to_index(r.get(0), "width");
      std::string fill = name == "zfill" ? "0" : r.has(1) ? need_str(r.get(1), "fillchar") : " ";
      int64_t len = static_cast<int64_t>(utf8_length(s));
      if (width <= len) return Value::string(s);
      if (width > static_cast<int64_t>(kMaxSequence)) throw Error("width too large");
      int64_t pad = width - len, left = name == "rjust" || name == "zfill" ? pad : name == "ljust" ? 0 : pad / 2 + (pad & width & 1);
      std::string out, body = s;
      if (name == "zfill" && !s.empty() && (s[0] == '-' || s[0] == '+')) {
        out += s[0];
        body = s.substr(1);
      }
      for (int64_t k = 0; k < left; ++k) out += fill;
      out += body;
      for (int64_t k = 0; k < pad - left; ++k) out += fill;
      return Value::string(std::move(out));
    });
  if (name == "partition" || name == "rpartition")
    return M([s, name](CallArgs& a) {
      ArgReader r(a, name.c_str(), {"sep"});
      std::string sep = need_str(r.get(0), "sep");
      size_t f = name == "partition" ? s.find(sep) : s.rfind(sep);
      if (f == std::string::npos)
        return Value::make_tuple(name == "partition" ? List{Value::string(s), Value::string(""), Value::string("")}
                                                     : List{Value::string(""), Value::string(""), Value::string(s)});
      return Value::make_tuple({Value::string(s.substr(0, f)), Value::string(sep), Value::string(s.substr(f + sep.size()))});
    });
  return Value();
}

Value unsafe(const Value& self, const std::string& name) {
  std::string t = self.type_name();
  return Value::callable(t + "." + name, [t, name](CallArgs&) -> Value {
    throw Error("access to attribute '" + name + "' of '" + t + "' object is unsafe.");
  });
}

}  // namespace

Value bound_method(const Value& self, const std::string& name) {
  if (self.is_string()) return string_method(self, name);
  if (self.type == Value::Type::Dict) {
    auto d = self.dict;
    if (name == "items" || name == "keys" || name == "values")
      return Value::callable("dict." + name, [d, name](CallArgs& a) {
        ArgReader r(a, name.c_str(), {});
        List out;
        for (const auto& kv : d->items) {
          if (name == "items") out.push_back(Value::make_tuple({Value::string(kv.first), kv.second}));
          else out.push_back(name == "keys" ? Value::string(kv.first) : kv.second);
        }
        return Value::make_list(std::move(out));
      });
    if (name == "get")
      return Value::callable("dict.get", [d](CallArgs& a) {
        ArgReader r(a, "get", {"key", "default"});
        Value k = r.get(0);
        const Value* v = k.is_string() ? d->find(k.s) : nullptr;
        return v ? *v : r.get(1, Value::none());
      });
    if (name == "copy")
      return Value::callable("dict.copy", [d](CallArgs&) { return Value::make_dict(*d); });
    static const std::set<std::string> mut = {"update", "pop", "popitem", "setdefault", "clear"};
    if (mut.count(name)) return unsafe(self, name);
    return Value();
  }
  if (self.is_seq()) {
    auto l = self.list;
    if (name == "index" || name == "count")
      return Value::callable("list." + name, [l, name](CallArgs& a) {
        ArgReader r(a, name.c_str(), {"value"});
        Value x = r.get(0);
        int64_t n = 0;
        for (size_t k = 0; k < l->size(); ++k) {
          if (!values_equal((*l)[k], x)) continue;
          if (name == "index") return Value::integer(static_cast<int64_t>(k));
          ++n;
        }
        if (name == "index") throw Error(to_repr(x) + " is not in list");
        return Value::integer(n);
      });
    if (name == "copy" && self.type == Value::Type::List)
      return Value::callable("list.copy", [l](CallArgs&) { return Value::make_list(*l); });
    static const std::set<std::string> mut = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
    if (self.type == Value::Type::List && mut.count(name)) return unsafe(self, name);
  }
  return Value();
}

}  // namespace lily::jinja
