// Built-in filters, with jinja2 3.1's semantics; tojson is transformers' override: json.dumps(x,
// ensure_ascii=False, indent=None, separators=None, sort_keys=False), so Python's default separators apply.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/jinja/eval.h"
#include "chat/jinja/ops.h"
#include "chat/jinja/strings.h"

namespace lily::jinja {

namespace {

int64_t length_of(const Value& v) {
  switch (v.type) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String: return static_cast<int64_t>(utf8_length(v.s));
    case Value::Type::List: case Value::Type::Tuple: return static_cast<int64_t>(v.list->size());
    case Value::Type::Dict: case Value::Type::Namespace: return static_cast<int64_t>(v.dict->items.size());
    default: throw Error("object of type '" + v.type_name() + "' has no len()");
  }
}

// jinja2's attribute lookup for filters: "a.b.0" walks attributes/items.
Value attr_path(const Value& v, const Value& attr) {
  if (attr.is_int()) return get_item(v, attr);
  std::string path = to_str(attr);
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = digits ? get_item(cur, Value::integer(std::stoll(part))) : get_item(cur, Value::string(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

// Sort/unique key: strings are lowered unless case_sensitive.
Value sort_key(const Value& v, bool case_sensitive) {
  return (!case_sensitive && v.is_string()) ? Value::string(py_lower(v.s)) : v;
}

double to_float(const Value& v, double def, bool* ok) {
  *ok = true;
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    std::string t = py_strip(v.s, nullptr, true, true);
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (!t.empty() && end && *end == 0) return d;
  }
  *ok = false;
  return def;
}

Value do_round(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) throw Error("round: a number is required, not '" + v.type_name() + "'");
  if (method != "common" && method != "ceil" && method != "floor")
    throw Error("method must be common, ceil or floor");
  if (method == "common") {
    if (v.is_int()) return precision >= 0 ? Value::integer(v.as_int()) : Value::number(std::round(v.as_double()));
    double x = v.f;
    if (!std::isfinite(x)) return Value::number(x);
    if (precision >= 0 && precision < 300) {
      char buf[512];
      std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), x);  // exact, round-half-even
      return Value::number(std::strtod(buf, nullptr));
    }
    double m = std::pow(10.0, static_cast<double>(-precision));
    return Value::number(std::nearbyint(x / m) * m);
  }
  double m = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double() * m;
  return Value::number((method == "ceil" ? std::ceil(x) : std::floor(x)) / m);
}

std::string do_indent(std::string s, const Value& width, bool first, bool blank) {
  std::string ind = width.is_string() ? width.s : std::string(static_cast<size_t>(std::max<int64_t>(0, to_index(width, "width"))), ' ');
  s += "\n";
  auto lines = py_splitlines(s, false);
  std::string rv;
  if (blank) {
    for (size_t k = 0; k < lines.size(); ++k) {
      if (k) rv += "\n" + ind;
      rv += lines[k];
    }
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t k = 1; k < lines.size(); ++k) {
      rv += "\n";
      if (!lines[k].empty()) rv += ind;
      rv += lines[k];
    }
  }
  return first ? ind + rv : rv;
}

List select_items(Interpreter& in, const Value& seq, CallArgs& a, bool attr_mode, bool keep) {
  if (attr_mode && a.pos.empty()) throw Error("selectattr/rejectattr need an attribute name");
  List out;
  Value attr = attr_mode ? a.pos[0] : Value();
  size_t test_at = attr_mode ? 1 : 0;
  std::string test = a.pos.size() > test_at ? to_str(a.pos[test_at]) : "";
  for (const auto& item : iterate(seq)) {
    Value x = attr_mode ? attr_path(item, attr) : item;
    bool r;
    if (test.empty()) {
      r = x.truthy();
    } else {
      CallArgs targs;
      targs.pos.assign(a.pos.begin() + static_cast<long>(test_at + 1), a.pos.end());
      targs.kw = a.kw;
      r = in.apply_test(test, x, targs);
    }
    if (r == keep) out.push_back(item);
  }
  return out;
}

}  // namespace

Value run_filter(Interpreter& in, const std::string& name, const Value& v, CallArgs& a) {
  if (name == "tojson") {
    ArgReader r(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
    JsonOptions o;
    o.ensure_ascii = r.get(0, Value::boolean(false)).truthy();
    Value ind = r.get(1, Value::none());
    if (!ind.is_none()) {
      o.has_indent = true;
      o.indent = ind.is_string() ? ind.s : std::string(static_cast<size_t>(std::max<int64_t>(0, to_index(ind, "indent"))), ' ');
    }
    Value sep = r.get(2, Value::none());
    if (!sep.is_none()) {
      if (!sep.is_seq() || sep.list->size() != 2 || !(*sep.list)[0].is_string() || !(*sep.list)[1].is_string())
        throw Error("tojson: separators must be a pair of strings");
      o.has_separators = true;
      o.item_sep = (*sep.list)[0].s;
      o.key_sep = (*sep.list)[1].s;
    }
    o.sort_keys = r.get(3, Value::boolean(false)).truthy();
    return Value::string(to_json(v, o));
  }
  if (name == "default" || name == "d") {
    ArgReader r(a, "default", {"default_value", "boolean"});
    if (v.is_undefined() || (r.get(1, Value::boolean(false)).truthy() && !v.truthy())) return r.get(0, Value::string(""));
    return v;
  }
  if (name == "safe") { ArgReader r(a, "safe", {}); return v; }
  if (name == "length" || name == "count") { ArgReader r(a, name.c_str(), {}); return Value::integer(length_of(v)); }
  if (name == "string") { ArgReader r(a, "string", {}); return Value::string(to_str(v)); }
  if (name == "list") { ArgReader r(a, "list", {}); require_defined(v); return Value::make_list(iterate(v)); }
  if (name == "items") {
    ArgReader r(a, "items", {});
    if (v.is_undefined()) return Value::make_list({});
    if (!v.is_mapping()) throw Error("Can only get item pairs from a mapping.");
    List out;
    for (const auto& kv : v.dict->items) out.push_back(Value::make_tuple({Value::string(kv.first), kv.second}));
    return Value::make_list(std::move(out));
  }
  if (name == "trim") {
    ArgReader r(a, "trim", {"chars"});
    Value c = r.get(0, Value::none());
    std::string chars = c.is_none() ? "" : to_str(c);
    return Value::string(py_strip(to_str(v), c.is_none() ? nullptr : &chars, true, true));
  }
  if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
    ArgReader r(a, name.c_str(), {});
    std::string s = to_str(v);
    return Value::string(name == "upper" ? py_upper(s) : name == "lower" ? py_lower(s) : name == "title" ? py_title(s) : py_capitalize(s));
  }
  if (name == "replace") {
    ArgReader r(a, "replace", {"old", "new", "count"});
    Value cnt = r.get(2, Value::none());
    return Value::string(py_replace(to_str(v), to_str(r.get(0)), to_str(r.get(1)), cnt.is_none() ? -1 : static_cast<long>(to_index(cnt, "count"))));
  }
  if (name == "join") {
    ArgReader r(a, "join", {"d", "attribute"});
    std::string sep = to_str(r.get(0, Value::string(""))), out;
    Value attr = r.get(1, Value::none());
    bool first = true;
    for (const auto& item : iterate(v)) {
      if (!first) out += sep;
      first = false;
      out += to_str(attr.is_none() ? item : attr_path(item, attr));
    }
    return Value::string(std::move(out));
  }
  if (name == "first" || name == "last") {
    ArgReader r(a, name.c_str(), {});
    List items = iterate(v);
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "reverse") {
    ArgReader r(a, "reverse", {});
    if (v.is_string()) return slice(v, Value::none(), Value::none(), Value::integer(-1));
    List items = iterate(v);
    std::reverse(items.begin(), items.end());
    return Value::make_list(std::move(items));
  }
  if (name == "abs") {
    ArgReader r(a, "abs", {});
    if (v.is_int()) return v.as_int() < 0 ? unary_minus(v) : Value::integer(v.as_int());
    if (v.type == Value::Type::Float) return Value::number(std::fabs(v.f));
    throw Error("bad operand type for abs(): '" + v.type_name() + "'");
  }
  if (name == "int") {
    ArgReader r(a, "int", {"default", "base"});
    Value def = r.get(0, Value::integer(0));
    if (v.is_int()) return Value::integer(v.as_int());
    if (v.type == Value::Type::Float) return std::isfinite(v.f) ? Value::integer(static_cast<int64_t>(v.f)) : def;
    if (v.is_string()) {
      std::string t = py_strip(v.s, nullptr, true, true);
      int base = static_cast<int>(to_index(r.get(1, Value::integer(10)), "base"));
      char* end = nullptr;
      errno = 0;
      long long x = std::strtoll(t.c_str(), &end, base);
      if (!t.empty() && end && *end == 0 && errno == 0) return Value::integer(x);
      bool ok;
      double d = to_float(v, 0, &ok);
      if (ok && std::isfinite(d)) return Value::integer(static_cast<int64_t>(d));
    }
    return def;
  }
  if (name == "float") {
    ArgReader r(a, "float", {"default"});
    bool ok;
    double d = to_float(v, 0, &ok);
    return ok ? Value::number(d) : r.get(0, Value::number(0.0));
  }
  if (name == "round") {
    ArgReader r(a, "round", {"precision", "method"});
    return do_round(v, to_index(r.get(0, Value::integer(0)), "precision"), to_str(r.get(1, Value::string("common"))));
  }
  if (name == "indent") {
    ArgReader r(a, "indent", {"width", "first", "blank"});
    return Value::string(do_indent(to_str(v), r.get(0, Value::integer(4)), r.get(1, Value::boolean(false)).truthy(),
                                   r.get(2, Value::boolean(false)).truthy()));
  }
  if (name == "escape" || name == "e" || name == "forceescape") {
    ArgReader r(a, name.c_str(), {});
    return Value::string(html_escape(to_str(v)));
  }
  if (name == "wordcount") {
    ArgReader r(a, "wordcount", {});
    int64_t n = 0;
    bool in_word = false;
    for (char32_t c : utf8_decode(to_str(v))) {
      bool w = c == '_' || cp_is_alnum(c);
      if (w && !in_word) ++n;
      in_word = w;
    }
    return Value::integer(n);
  }
  if (name == "center") {
    ArgReader r(a, "center", {"width"});
    CallArgs ca;
    ca.pos.push_back(r.get(0, Value::integer(80)));
    return in.call(bound_method(Value::string(to_str(v)), "center"), ca);
  }
  if (name == "format") {
    std::string fmt = to_str(v);
    Value args = a.pos.size() == 1 ? a.pos[0] : Value::make_tuple(a.pos);
    if (a.pos.size() == 1 && a.pos[0].type != Value::Type::Tuple) args = Value::make_tuple({a.pos[0]});
    return binary_op("%", Value::string(fmt), args);
  }
  if (name == "attr") {
    ArgReader r(a, "attr", {"name"});
    std::string n = to_str(r.get(0));
    require_defined(v);
    if (v.type == Value::Type::Namespace || n.empty() || n[0] == '_') return get_attr(v, n);
    Value m = bound_method(v, n);  // attributes only: a dict's keys are not attributes
    return m.is_undefined() ? Value::undefined(std::string("'") + v.type_name() + " object' has no attribute '" + n + "'") : m;
  }
  if (name == "batch") {
    ArgReader r(a, "batch", {"linecount", "fill_with"});
    int64_t n = to_index(r.get(0), "linecount");
    if (n <= 0) throw Error("batch: linecount must be positive");
    List out, cur;
    for (const auto& item : iterate(v)) {
      cur.push_back(item);
      if (static_cast<int64_t>(cur.size()) == n) { out.push_back(Value::make_list(std::move(cur))); cur.clear(); }
    }
    if (!cur.empty()) {
      if (r.has(1)) while (static_cast<int64_t>(cur.size()) < n) cur.push_back(r.get(1));
      out.push_back(Value::make_list(std::move(cur)));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "map") {
    List out;
    const Value* attr = nullptr;
    Value def;
    for (const auto& kv : a.kw) {
      if (kv.first == "attribute") attr = &kv.second;
      else if (kv.first == "default") def = kv.second;
    }
    if (attr) {
      for (const auto& item : iterate(v)) {
        Value x = attr_path(item, *attr);
        out.push_back(x.is_undefined() && !def.is_undefined() ? def : x);
      }
      return Value::make_list(std::move(out));
    }
    if (a.pos.empty()) throw Error("map requires a filter name or attribute=");
    std::string f = to_str(a.pos[0]);
    for (const auto& item : iterate(v)) {
      CallArgs fa;
      fa.pos.assign(a.pos.begin() + 1, a.pos.end());
      fa.kw = a.kw;
      out.push_back(in.apply_filter(f, item, fa));
    }
    return Value::make_list(std::move(out));
  }
  if (name == "select" || name == "reject" || name == "selectattr" || name == "rejectattr")
    return Value::make_list(select_items(in, v, a, name.size() > 6, name[0] == 's'));
  if (name == "unique") {
    ArgReader r(a, "unique", {"case_sensitive", "attribute"});
    bool cs = r.get(0, Value::boolean(false)).truthy();
    Value attr = r.get(1, Value::none());
    List out, seen;
    for (const auto& item : iterate(v)) {
      Value key = sort_key(attr.is_none() ? item : attr_path(item, attr), cs);
      bool dup = false;
      for (const auto& s : seen) dup = dup || values_equal(s, key);
      if (!dup) { seen.push_back(key); out.push_back(item); }
    }
    return Value::make_list(std::move(out));
  }
  if (name == "sort" || name == "min" || name == "max") {
    bool is_sort = name == "sort";
    ArgReader r(a, name.c_str(), is_sort ? std::vector<std::string>{"reverse", "case_sensitive", "attribute"}
                                         : std::vector<std::string>{"case_sensitive", "attribute"});
    bool rev = is_sort && r.get(0, Value::boolean(false)).truthy();
    bool cs = r.get(is_sort ? 1 : 0, Value::boolean(false)).truthy();
    Value attr = r.get(is_sort ? 2 : 1, Value::none());
    List items = iterate(v);
    auto key = [&](const Value& x) { return sort_key(attr.is_none() ? x : attr_path(x, attr), cs); };
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      return rev ? values_compare(key(y), key(x)) < 0 : values_compare(key(x), key(y)) < 0;
    });
    if (is_sort) return Value::make_list(std::move(items));
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    if (name == "min") return items.front();
    // max: the first of the largest (Python's max keeps the first maximal element)
    size_t best = 0;
    for (size_t k = 1; k < items.size(); ++k)
      if (values_compare(key(items[k]), key(items[best])) > 0) best = k;
    return items[best];
  }
  if (name == "sum") {
    ArgReader r(a, "sum", {"attribute", "start"});
    Value attr = r.get(0, Value::none());
    Value total = r.get(1, Value::integer(0));
    for (const auto& item : iterate(v)) total = binary_op("+", total, attr.is_none() ? item : attr_path(item, attr));
    return total;
  }
  if (name == "dictsort") {
    ArgReader r(a, "dictsort", {"case_sensitive", "by", "reverse"});
    if (!v.is_mapping()) throw Error("You can only sort by either \"key\" or \"value\"");
    bool cs = r.get(0, Value::boolean(false)).truthy();
    std::string by = to_str(r.get(1, Value::string("key")));
    bool rev = r.get(2, Value::boolean(false)).truthy();
    size_t pos = by == "key" ? 0 : by == "value" ? 1 : 2;
    if (pos == 2) throw Error("You can only sort by either \"key\" or \"value\"");
    List items;
    for (const auto& kv : v.dict->items) items.push_back(Value::make_tuple({Value::string(kv.first), kv.second}));
    std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
      Value kx = sort_key((*x.list)[pos], cs), ky = sort_key((*y.list)[pos], cs);
      return rev ? values_compare(ky, kx) < 0 : values_compare(kx, ky) < 0;
    });
    return Value::make_list(std::move(items));
  }
  if (name == "pprint") return Value::string(to_repr(v));
  throw Error("No filter named '" + name + "'.");
}

}  // namespace lily::jinja
