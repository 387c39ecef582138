// Global functions: jinja2's range, dict, namespace, cycler, joiner, and transformers' raise_exception and
// strftime_now.
#include <ctime>

#include "chat/jinja/eval.h"
#include "chat/jinja/ops.h"

namespace lily::jinja {

void add_builtin_globals(Dict& g) {
  g.set("range", Value::callable("range", [](CallArgs& a) {
    if (!a.kw.empty()) throw Error("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) throw Error("range expected 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = to_index(a.pos[0], "range() argument");
    } else {
      start = to_index(a.pos[0], "range() argument");
      stop = to_index(a.pos[1], "range() argument");
      if (a.pos.size() == 3) step = to_index(a.pos[2], "range() argument");
    }
    if (step == 0) throw Error("range() arg 3 must not be zero");
    List out;
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (out.size() >= kMaxSequence) throw Error("range too big");
      out.push_back(Value::integer(k));
    }
    return Value::make_list(std::move(out));
  }));
  g.set("dict", Value::callable("dict", [](CallArgs& a) {
    Dict d;
    for (const auto& v : a.pos) {
      if (!v.is_mapping()) throw Error("dict() positional argument must be a mapping");
      for (const auto& kv : v.dict->items) d.set(kv.first, kv.second);
    }
    for (const auto& kv : a.kw) d.set(kv.first, kv.second);
    return Value::make_dict(std::move(d));
  }));
  g.set("namespace", Value::callable("namespace", [](CallArgs& a) {
    Dict d;
    for (const auto& v : a.pos) {
      if (!v.is_mapping()) throw Error("namespace() positional argument must be a mapping");
      for (const auto& kv : v.dict->items) d.set(kv.first, kv.second);
    }
    for (const auto& kv : a.kw) d.set(kv.first, kv.second);
    return Value::make_namespace(std::move(d));
  }));
  g.set("raise_exception", Value::callable("raise_exception", [](CallArgs& a) -> Value {
    throw TemplateError(a.pos.empty() ? std::string("raise_exception called") : to_str(a.pos[0]));
  }));
  g.set("strftime_now", Value::callable("strftime_now", [](CallArgs& a) {
    ArgReader r(a, "strftime_now", {"format"});
    std::string fmt = to_str(r.get(0));
    std::time_t t = std::time(nullptr);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[512];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::string(std::string(buf, n));
  }));
  g.set("joiner", Value::callable("joiner", [](CallArgs& a) {
    ArgReader r(a, "joiner", {"sep"});
    std::string sep = to_str(r.get(0, Value::string(", ")));
    auto used = std::make_shared<bool>(false);
    return Value::callable("joiner", [sep, used](CallArgs&) {
      if (!*used) {
        *used = true;
        return Value::string("");
      }
      return Value::string(sep);
    });
  }));
  g.set("cycler", Value::callable("cycler", [](CallArgs& a) {
    if (a.pos.empty()) throw Error("at least one item has to be provided");
    auto items = std::make_shared<List>(a.pos);
    auto ns = Value::make_namespace();
    auto pos = std::make_shared<size_t>(0);
    std::weak_ptr<Dict> weak = ns.dict;
    ns.dict->set("current", (*items)[0]);
    ns.dict->set("next", Value::callable("cycler.next", [items, pos, weak](CallArgs&) {
      Value v = (*items)[*pos];
      *pos = (*pos + 1) % items->size();
      if (auto d = weak.lock()) d->set("current", (*items)[*pos]);
      return v;
    }));
    ns.dict->set("reset", Value::callable("cycler.reset", [items, pos, weak](CallArgs&) {
      *pos = 0;
      if (auto d = weak.lock()) d->set("current", (*items)[0]);
      return Value::none();
    }));
    return ns;
  }));
}

}  // namespace lily::jinja
