// response_format json_schema: schema compilation (supported keywords, errors naming the rest), the
// byte-level matcher against an independent validator of parsed JSON, its closing cost, and the token
// gate closing a schema-constrained reply within its budget.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "engine/json_reply.h"
#include "engine/json_schema.h"

using namespace lily;
using json = nlohmann::json;

namespace {

const json kPerson = json::parse(R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "kind": {"enum": ["cat", "dog", 7]},
    "ok": {"type": "boolean"},
    "nick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "home": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"const": "75001"}},
             "required": ["city", "zip"], "additionalProperties": false}
  },
  "required": ["name", "age", "home"],
  "additionalProperties": false
})");

// An independent check of a parsed value against the supported subset (what the matcher must guarantee).
bool conforms(const json& v, const json& s, const json& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"];
    if (r == "#") return conforms(v, root, root);
    return conforms(v, root["$defs"][r.substr(8)], root);
  }
  if (s.contains("const")) return v == s["const"];
  if (s.contains("enum")) {
    for (const auto& e : s["enum"])
      if (e == v) return true;
    return false;
  }
  if (s.contains("anyOf")) {
    for (const auto& a : s["anyOf"])
      if (conforms(v, a, root)) return true;
    return false;
  }
  if (!s.contains("type")) return true;
  if (s["type"].is_array()) {
    for (const auto& t : s["type"]) {
      json one = s;
      one["type"] = t;
      if (conforms(v, one, root)) return true;
    }
    return false;
  }
  const std::string t = s["type"];
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer();
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "array") {
    if (!v.is_array()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    for (const auto& x : v)
      if (!conforms(x, s.value("items", json(true)), root)) return false;
    return true;
  }
  if (!v.is_object()) return false;
  for (const auto& r : s.value("required", json::array()))
    if (!v.contains(r.get<std::string>())) return false;
  const json props = s.value("properties", json::object());
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (props.contains(it.key())) {
      if (!conforms(it.value(), props[it.key()], root)) return false;
    } else if (s.contains("additionalProperties") && s["additionalProperties"] == false) {
      return false;
    }
  }
  return true;
}

SchemaMatcher matcher(const json& schema) { return SchemaMatcher(JsonSchema::compile(schema)); }

bool accepts_whole(const json& schema, const std::string& text) {
  SchemaMatcher m = matcher(schema);
  m.advance(text);
  return !m.failed() && m.complete();
}

std::string compile_error(const json& schema) {
  try {
    JsonSchema::compile(schema);
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(compile_error(json::parse(R"({"type":"string","format":"date-time"})")).find("'format'"), std::string::npos);
  const std::string e = compile_error(json::parse(R"({"type":"object","properties":{"a":{"type":"string","pattern":"x","minLength":2}}})"));
  EXPECT_NE(e.find("'minLength'"), std::string::npos) << e;
  EXPECT_NE(e.find("'pattern'"), std::string::npos) << e;
  EXPECT_NE(e.find("properties.a"), std::string::npos) << e;
  EXPECT_NE(compile_error(json::parse(R"({"type":"object","required":["x"]})")).find("'x'"), std::string::npos);
  EXPECT_NE(compile_error(json::parse(R"({"type":"strnig"})")).find("strnig"), std::string::npos);
  EXPECT_NE(compile_error(json::parse(R"({"enum":[]})")).find("enum"), std::string::npos);
  EXPECT_NE(compile_error(json::parse(R"({"$ref":"http://x/y"})")).find("$ref"), std::string::npos);
  // a required property that can only recurse forever: no finite value
  EXPECT_NE(compile_error(json::parse(R"({"type":"object","properties":{"n":{"$ref":"#"}},"required":["n"]})")).find("no finite"),
            std::string::npos);
  EXPECT_EQ(compile_error(kPerson), "");
}

TEST(JsonSchema, AcceptsConformingCompactJson) {
  for (const char* doc : {
           R"({"name":"Ann","age":31,"home":{"city":"Paris","zip":"75001"}})",
           R"({"home":{"zip":"75001","city":"P\u00e9ris \"x\""},"age":-0,"name":"","tags":["a","b"],"kind":7})",
           R"({"name":"é","age":1,"score":-1.5e+3,"ok":false,"nick":null,"kind":"dog","home":{"city":"","zip":"75001"}})",
       })
    EXPECT_TRUE(accepts_whole(kPerson, doc)) << doc;
}

TEST(JsonSchema, RejectsWhatTheSchemaForbids) {
  for (const char* doc : {
           R"({"name":"Ann","age":31})",                                            // home missing
           R"({"name":"Ann","age":31.5,"home":{"city":"P","zip":"75001"}})",        // integer with a fraction
           R"({"name":1,"age":31,"home":{"city":"P","zip":"75001"}})",              // wrong type
           R"({"name":"A","age":3,"home":{"city":"P","zip":"75002"}})",             // const
           R"({"name":"A","age":3,"home":{"city":"P","zip":"75001","x":1}})",       // additionalProperties false
           R"({"name":"A","name":"B","age":3,"home":{"city":"P","zip":"75001"}})",  // duplicate key
           R"({"name":"A","age":3,"kind":"cow","home":{"city":"P","zip":"75001"}})",  // enum
           R"({"name":"A","age":3,"tags":["a","b","c","d"],"home":{"city":"P","zip":"75001"}})",  // maxItems
           R"({"name": "A","age":3,"home":{"city":"P","zip":"75001"}})",           // whitespace: compact only
           R"({"name":"\ud800","age":3,"home":{"city":"P","zip":"75001"}})",        // surrogate escape
       }) {
    EXPECT_FALSE(accepts_whole(kPerson, doc)) << doc;
  }
  SchemaMatcher m = matcher(kPerson);
  m.advance("{\"nam");
  EXPECT_FALSE(m.failed());
  m.advance("x");
  EXPECT_TRUE(m.failed());
}

TEST(JsonSchema, MinCloseBytesIsExactAtTheStart) {
  // {"name":"","age":0,"home":{"city":"","zip":"75001"}} is the shortest conforming text
  const std::string shortest = R"({"name":"","age":0,"home":{"city":"","zip":"75001"}})";
  EXPECT_EQ(matcher(kPerson).min_close_bytes(), static_cast<int>(shortest.size()));
  EXPECT_TRUE(accepts_whole(kPerson, shortest));
  EXPECT_EQ(matcher(json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":3})")).min_close_bytes(), 7);
}

// Random walks: at each step take a random byte the matcher accepts, but only one that keeps the text
// closable within the bytes left (as the token gate does); at the end the text must be complete, parse,
// and conform according to the independent validator. Also checks that whenever the cost is positive some
// byte lowers it by exactly one (what the gate's budget rule relies on).
TEST(JsonSchema, RandomWalksEndInConformingJson) {
  const json recursive = json::parse(R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"number"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"],"additionalProperties":false}},
      "$ref":"#/$defs/node"})");
  const json open = json::parse(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"]})");
  const json list = json::parse(R"({"type":["array","null"],"items":{"anyOf":[{"type":"boolean"},{"type":"string"}]},"minItems":1})");
  std::string alphabet;
  for (int c = 0x20; c < 0x7f; ++c) alphabet += static_cast<char>(c);
  alphabet += "\xc3\xa9";  // a 2-byte character's bytes
  std::mt19937 rng(7);
  for (const json* schema : {&kPerson, &recursive, &open, &list}) {
    for (int walk = 0; walk < 40; ++walk) {
      SchemaMatcher m = matcher(*schema);
      const int budget = m.min_close_bytes() + static_cast<int>(rng() % 60);
      std::string text;
      for (int left = budget; left > 0 && !m.complete(); --left) {
        std::vector<char> ok;
        bool lowers = false;
        const int cost = m.min_close_bytes();
        for (char c : alphabet) {
          SchemaMatcher n = m;
          n.advance(std::string_view(&c, 1));
          if (n.failed()) continue;
          if (n.min_close_bytes() == cost - 1) lowers = true;
          if (n.min_close_bytes() <= left - 1) ok.push_back(c);
        }
        ASSERT_TRUE(lowers) << "no byte lowers the cost " << cost << " after: " << text;
        ASSERT_FALSE(ok.empty()) << text;
        const char c = ok[rng() % ok.size()];
        text += c;
        m.advance(std::string_view(&c, 1));
      }
      ASSERT_TRUE(m.complete()) << schema->dump() << "\n" << text;
      const json v = json::parse(text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << text;
      EXPECT_TRUE(conforms(v, *schema, *schema)) << text;
    }
  }
}

TEST(JsonSchema, GateClosesASchemaReplyWithinTheBudget) {
  // byte-level vocabulary (id = byte) plus an end token
  const int32_t kEnd = 256;
  auto text_of = [](int32_t id) { return id < 256 ? std::string(1, static_cast<char>(id)) : std::string(); };
  const json schema = json::parse(R"({"type":"object","properties":{"a":{"type":"string"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false})");
  JsonReplyGate g(text_of, {kEnd}, false, JsonSchema::compile(schema));
  std::string out;
  const int budget = 20;
  for (int i = 0; i < budget && !g.complete(); ++i) {
    g.begin_step(budget - i);
    // the "model" always prefers to keep writing the string: 'x' when allowed
    int32_t pick = -1;
    for (int32_t id : {int32_t('x'), int32_t('{'), int32_t('"'), int32_t('a'), int32_t(':'), int32_t(','), int32_t('b'),
                       int32_t('1'), int32_t('}')})
      if (g.allows(id)) {
        pick = id;
        break;
      }
    ASSERT_GE(pick, 0) << out;
    g.accept(pick);
    out += static_cast<char>(pick);
  }
  ASSERT_TRUE(g.complete()) << out;
  EXPECT_TRUE(g.steered());
  EXPECT_LE(out.size(), 20u);
  const json v = json::parse(out);
  EXPECT_TRUE(conforms(v, schema, schema)) << out;
  EXPECT_FALSE(g.allows(int32_t('x')));
  EXPECT_TRUE(g.allows(kEnd));
}
