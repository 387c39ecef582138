// JsonSchema::compile: JSON Schema -> SchemaNode graph (see json_schema.h for the supported keywords).
#include <algorithm>
#include <map>
#include <set>

#include "engine/json_schema.h"

namespace lily {

using json = nlohmann::json;
using Kind = SchemaNode::Kind;

namespace {

const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "strict", "$defs", "definitions"};
const std::set<std::string> kKeywords = {"type", "properties", "required", "additionalProperties", "items",
                                         "minItems", "maxItems", "enum", "const", "anyOf", "$ref"};

int sat_add(int a, int b) { return std::min(JsonSchema::kInf, a + b); }

}  // namespace

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, JsonSchema& out) : root_(root), out_(out) {}

  void run() {
    out_.any_ = add(Kind::Any);
    out_.nodes_[static_cast<size_t>(out_.any_)].literals = {"true", "false", "null"};
    out_.root_ = reserve();
    refs_["#"] = out_.root_;
    fill(out_.root_, root_, "schema");
    if (!unsupported_.empty()) {
      std::string list;
      for (const auto& u : unsupported_) list += (list.empty() ? "" : "; ") + u;
      throw SchemaError("unsupported JSON Schema keywords: " + list +
                        " (supported: type, properties, required, additionalProperties, items, minItems, maxItems, "
                        "enum, const, anyOf, $ref)");
    }
    compute_min_len();
    if (out_.node(out_.root_).min_len >= JsonSchema::kInf)
      throw SchemaError("the schema admits no finite JSON value (every branch recurses through a required property)");
  }

 private:
  int add(Kind k) {
    out_.nodes_.emplace_back();
    out_.nodes_.back().kind = k;
    return static_cast<int>(out_.nodes_.size()) - 1;
  }
  int reserve() { return add(Kind::Any); }
  SchemaNode& at(int i) { return out_.nodes_[static_cast<size_t>(i)]; }

  int compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return out_.any_;
      throw SchemaError(path + ": the schema 'false' admits no value");
    }
    if (s.is_object() && s.contains("$ref")) {
      check_keywords(s, path);
      return ref(s["$ref"], path);
    }
    if (++nodes_made_ > 4096) throw SchemaError("the schema is too large (more than 4096 subschemas)");
    const int n = reserve();
    fill(n, s, path);
    return n;
  }

  int ref(const json& r, const std::string& path) {
    if (!r.is_string()) throw SchemaError(path + ".$ref must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const json* sub = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (target.rfind(p, 0) != 0) continue;
      const std::string defs = p.substr(2, p.size() - 3);
      const std::string name = target.substr(p.size());
      if (root_.is_object() && root_.contains(defs) && root_[defs].is_object() && root_[defs].contains(name))
        sub = &root_[defs][name];
    }
    if (!sub) throw SchemaError(path + ".$ref '" + target + "' is not supported (only '#', '#/$defs/NAME', '#/definitions/NAME' of this schema)");
    const int n = reserve();
    refs_[target] = n;
    fill(n, *sub, target);
    return n;
  }

  // Notes the keywords it does not know (all of them, reported together at the end of run()).
  void check_keywords(const json& s, const std::string& path) {
    std::string list;
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key())) list += (list.empty() ? "'" : ", '") + it.key() + "'";
    if (!list.empty() && unsupported_.size() < 32) unsupported_.push_back(path + ": " + list);
  }

  void fill(int n, const json& s, const std::string& path) {
    if (s.is_boolean()) {
      const int target = compile(s, path);
      at(n) = at(target);
      return;
    }
    if (!s.is_object()) throw SchemaError(path + " must be an object (a JSON Schema)");
    check_keywords(s, path);
    if (s.contains("$ref")) {  // a $ref inside a definition or at the root: alias through AnyOf
      const int target = ref(s["$ref"], path);
      at(n).kind = Kind::AnyOf;
      at(n).alts = {target};
      return;
    }
    if (s.contains("const")) {
      at(n).kind = Kind::Literals;
      at(n).literals = {s["const"].dump()};
      return;
    }
    if (s.contains("enum")) {
      const json& e = s["enum"];
      if (!e.is_array() || e.empty()) throw SchemaError(path + ".enum must be a non-empty array");
      at(n).kind = Kind::Literals;
      for (const auto& v : e) at(n).literals.push_back(v.dump());
      return;
    }
    if (s.contains("anyOf")) {
      const json& a = s["anyOf"];
      if (!a.is_array() || a.empty()) throw SchemaError(path + ".anyOf must be a non-empty array");
      for (const char* k : {"type", "properties", "items"})
        if (s.contains(k)) throw SchemaError(path + ": 'anyOf' beside '" + k + "' is not supported (put it in each branch)");
      at(n).kind = Kind::AnyOf;
      std::vector<int> alts;
      for (size_t i = 0; i < a.size(); ++i) alts.push_back(compile(a[i], path + ".anyOf[" + std::to_string(i) + "]"));
      at(n).alts = std::move(alts);
      return;
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      if (t.is_string()) types.push_back(t.get<std::string>());
      else if (t.is_array() && !t.empty())
        for (const auto& x : t) {
          if (!x.is_string()) throw SchemaError(path + ".type must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      else throw SchemaError(path + ".type must be a string or an array of strings");
    } else if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      types.push_back("object");
    } else if (s.contains("items")) {
      types.push_back("array");
    } else {
      return;  // Any
    }
    if (types.size() == 1) return typed(n, types[0], s, path);
    at(n).kind = Kind::AnyOf;
    std::vector<int> alts;
    for (const auto& t : types) {
      const int a = reserve();
      typed(a, t, s, path);
      alts.push_back(a);
    }
    at(n).alts = std::move(alts);
  }

  void typed(int n, const std::string& t, const json& s, const std::string& path) {
    if (t == "string") at(n).kind = Kind::String;
    else if (t == "number") at(n).kind = Kind::Number;
    else if (t == "integer") at(n).kind = Kind::Integer;
    else if (t == "boolean") at(n).kind = Kind::Literals, at(n).literals = {"true", "false"};
    else if (t == "null") at(n).kind = Kind::Literals, at(n).literals = {"null"};
    else if (t == "object") object(n, s, path);
    else if (t == "array") array(n, s, path);
    else throw SchemaError(path + ".type '" + t + "' is not a JSON Schema type");
  }

  void object(int n, const json& s, const std::string& path) {
    at(n).kind = Kind::Object;
    std::vector<SchemaNode::Prop> props;
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) throw SchemaError(path + ".properties must be an object");
      if (p.size() > 64) throw SchemaError(path + ".properties: at most 64 properties are supported");
      for (auto it = p.begin(); it != p.end(); ++it)
        props.push_back({json(it.key()).dump(), compile(it.value(), path + ".properties." + it.key())});
    }
    uint64_t required = 0;
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) throw SchemaError(path + ".required must be an array of strings");
      for (const auto& k : r) {
        if (!k.is_string()) throw SchemaError(path + ".required must be an array of strings");
        const std::string key = json(k.get<std::string>()).dump();
        auto it = std::find_if(props.begin(), props.end(), [&](const auto& p) { return p.key == key; });
        if (it == props.end())
          throw SchemaError(path + ".required names '" + k.get<std::string>() + "', which is not in properties");
        required |= uint64_t{1} << (it - props.begin());
      }
    }
    int additional = out_.any_;
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (a.is_boolean() && !a.get<bool>()) additional = -1;
      else additional = compile(a, path + ".additionalProperties");
    }
    at(n).props = std::move(props);
    at(n).required = required;
    at(n).additional = additional;
  }

  void array(int n, const json& s, const std::string& path) {
    at(n).kind = Kind::Array;
    const int items = s.contains("items") ? compile(s["items"], path + ".items") : out_.any_;
    auto count = [&](const char* k, int def) {
      if (!s.contains(k)) return def;
      const json& v = s[k];
      if (!v.is_number_integer() || v.get<long long>() < 0 || v.get<long long>() > 4096)
        throw SchemaError(path + "." + k + " must be an integer from 0 to 4096");
      return static_cast<int>(v.get<long long>());
    };
    at(n).items = items;
    at(n).min_items = count("minItems", 0);
    at(n).max_items = count("maxItems", -1);
    if (at(n).max_items >= 0 && at(n).max_items < at(n).min_items)
      throw SchemaError(path + ": maxItems is below minItems");
  }

  // Fewest bytes of each node's values (compact JSON): a fixed point, since $ref may recurse.
  void compute_min_len() {
    for (auto& nd : out_.nodes_) nd.min_len = JsonSchema::kInf;
    for (size_t round = 0; round <= out_.nodes_.size() + 1; ++round) {
      bool changed = false;
      for (auto& nd : out_.nodes_) {
        int v = JsonSchema::kInf;
        switch (nd.kind) {
          case Kind::Any: case Kind::Number: case Kind::Integer: v = 1; break;
          case Kind::String: v = 2; break;
          case Kind::Literals:
            for (const auto& l : nd.literals) v = std::min(v, static_cast<int>(l.size()));
            break;
          case Kind::AnyOf:
            for (int a : nd.alts) v = std::min(v, at(a).min_len);
            break;
          case Kind::Object: {
            v = 2;
            int k = 0;
            for (size_t i = 0; i < nd.props.size(); ++i)
              if (nd.required >> i & 1u) {
                v = sat_add(v, static_cast<int>(nd.props[i].key.size()) + 1 + (k++ ? 1 : 0));
                v = sat_add(v, at(nd.props[i].node).min_len);
              }
            break;
          }
          case Kind::Array: {
            v = 2;
            for (int i = 0; i < nd.min_items; ++i) v = sat_add(sat_add(v, at(nd.items).min_len), i ? 1 : 0);
            break;
          }
          default: break;
        }
        if (v < nd.min_len) {
          nd.min_len = v;
          changed = true;
        }
      }
      if (!changed) break;
    }
  }

  const json& root_;
  JsonSchema& out_;
  std::map<std::string, int> refs_;
  int nodes_made_ = 0;
  std::vector<std::string> unsupported_;  // "PATH: 'kw', 'kw2'" per subschema
};

std::shared_ptr<const JsonSchema> JsonSchema::compile(const json& schema) {
  auto s = std::make_shared<JsonSchema>();
  SchemaCompiler(schema, *s).run();
  return s;
}

}  // namespace lily
