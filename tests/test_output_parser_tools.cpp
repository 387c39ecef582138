// OutputParser: tool calls (Qwen3.5 XML and Qwen3 JSON forms), schema conversion, malformed output.
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "output_parser_harness.h"

using namespace lily;
using namespace lily::testing;
using nlohmann::json;

namespace {

const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
    "metric": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
    "note": {"type": ["string", "null"]}, "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    "code": {"type": "string"}}}}},
  {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}}}}}
])");

ParserOptions with_tools(bool thinking) {
  ParserOptions o;
  o.thinking_open_at_start = thinking;
  o.tools = kTools;
  return o;
}

std::string xml_call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [k, v] : params) s += "<parameter=" + k + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

}  // namespace

TEST(OutputParserTools, WeatherCallAfterReasoningAndContent) {
  std::string text = "Need the weather.\n</think>\n\nI'll check.\n\n" +
                     xml_call("get_weather", {{"city", "Paris"}, {"days", "3"}});
  ParseRun r = parse_all_ways(with_tools(true), text);
  EXPECT_EQ(r.reasoning, "Need the weather.");
  EXPECT_EQ(r.content, "I'll check.");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Paris","days":3})");
  EXPECT_EQ(r.calls[0].id.rfind("call_", 0), 0u);
}

TEST(OutputParserTools, ValuesConvertedBySchemaType) {
  std::string text = xml_call("get_weather", {{"city", "42"},
                                              {"days", "7"},
                                              {"temp", "21.5"},
                                              {"metric", "False"},
                                              {"opts", R"({"unit": "C", "n": [1, 2]})"},
                                              {"tags", R"(["a", "b"])"},
                                              {"note", "null"},
                                              {"limit", "None"}});
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  json a = json::parse(r.calls[0].arguments_json);
  EXPECT_EQ(a, json::parse(R"({"city": "42", "days": 7, "temp": 21.5, "metric": false,
      "opts": {"unit": "C", "n": [1, 2]}, "tags": ["a", "b"], "note": null, "limit": null})"));
  EXPECT_EQ(r.calls[0].arguments_json.substr(0, 25), R"({"city":"42","days":7,"te)");  // order kept
}

TEST(OutputParserTools, UnconvertibleValuesStayStrings) {
  std::string text = xml_call("get_weather", {{"days", "three"}, {"metric", "yes"}, {"opts", "{oops"},
                                              {"tags", R"({"not": "array"})"}, {"note", "None at all"}});
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments_json),
            json::parse(R"({"days": "three", "metric": "yes", "opts": "{oops",
                            "tags": "{\"not\": \"array\"}", "note": "None at all"})"));
}

TEST(OutputParserTools, UnknownToolTriesJsonLiteral) {
  std::string text = xml_call("other", {{"x", "42"}, {"y", "hello"}, {"z", R"({"k": [1]})"},
                                        {"b", "True"}, {"n", "null"}, {"s", "\"quoted\""}});
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "other");
  EXPECT_EQ(json::parse(r.calls[0].arguments_json),
            json::parse(R"({"x": 42, "y": "hello", "z": {"k": [1]}, "b": true, "n": null, "s": "quoted"})"));
}

TEST(OutputParserTools, MultiLineValuesKeepInnerText) {
  // Exactly one leading and one trailing newline is stripped; a </parameter> that is not followed by
  // the next tag of the call is part of the value, as are </function> and <tool_call> text.
  std::string file = "\n#include <x>\n\nint main() {}\n</parameter>\nnot the end </function> <tool_call>\n";
  std::string text = xml_call("write_file", {{"path", "/tmp/a.cpp"}, {"content", file}});
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  json a = json::parse(r.calls[0].arguments_json);
  EXPECT_EQ(a["path"], "/tmp/a.cpp");
  EXPECT_EQ(a["content"], file);
  EXPECT_EQ(r.content, "");
}

TEST(OutputParserTools, JsonInsideStringParameterStaysText) {
  std::string text = xml_call("write_file", {{"path", "x.json"}, {"content", "{\n  \"a\": 1\n}"}});
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments_json)["content"], "{\n  \"a\": 1\n}");
}

TEST(OutputParserTools, TwoCallsAndContentAround) {
  std::string text = "Checking both.\n\n" + xml_call("get_weather", {{"city", "Paris"}}) + "\n" +
                     xml_call("get_weather", {{"city", "Rome"}, {"days", "2"}}) + "\n\nDone.";
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Paris"})");
  EXPECT_EQ(r.calls[1].arguments_json, R"({"city":"Rome","days":2})");
  EXPECT_NE(r.calls[0].id, r.calls[1].id);
  EXPECT_EQ(r.content, "Checking both.\n\nDone.");
}

TEST(OutputParserTools, CallWithoutParameters) {
  ParseRun r = parse_all_ways(with_tools(false), "<tool_call>\n<function=now>\n</function>\n</tool_call>");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, "{}");
}

// Qwen3.5/3.6 sometimes opens a call without closing the reasoning block. Users expect the call to be
// made (not buried in reasoning_content), so <tool_call> + <function=...> ends the reasoning; the late
// </think> lands at the start of content and is dropped.
TEST(OutputParserTools, CallInsideReasoningIsACall) {
  std::string text = "I should check the weather.\n\n" + xml_call("get_weather", {{"city", "Oslo"}}) +
                     "\n</think>\n\n";
  ParseRun r = parse_all_ways(with_tools(true), text);
  EXPECT_EQ(r.reasoning, "I should check the weather.");
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Oslo"})");
}

TEST(OutputParserTools, MentionOfTagInReasoningStaysReasoning) {
  ParseRun r = parse_all_ways(with_tools(true), "Reply with <tool_call> tags.\n</think>\n\nOk");
  EXPECT_EQ(r.reasoning, "Reply with <tool_call> tags.");
  EXPECT_EQ(r.content, "Ok");
  EXPECT_TRUE(r.calls.empty());
  // With tool parsing off, even a full call inside reasoning stays reasoning.
  ParserOptions off = with_tools(true);
  off.parse_tool_calls = false;
  std::string call = xml_call("get_weather", {{"city", "Oslo"}});
  r = parse_all_ways(off, "x " + call + "</think>y");
  EXPECT_EQ(r.reasoning, "x " + call);
  EXPECT_EQ(r.content, "y");
}

TEST(OutputParserTools, Qwen3JsonForm) {
  std::string text =
      "Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", "
      "\"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"write_file\", \"arguments\": "
      "{\"path\": \"a\", \"content\": \"</tool_call> inside\"}}\n</tool_call>";
  ParseRun r = parse_all_ways(with_tools(false), text);
  EXPECT_EQ(r.content, "Let me look.");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Paris","days":3})");
  EXPECT_EQ(json::parse(r.calls[1].arguments_json)["content"], "</tool_call> inside");
  // Arguments given as a JSON string are accepted too.
  r = parse_all_ways(with_tools(false), R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"a":1})");
  // Braces and escaped quotes inside strings do not end the object.
  r = parse_all_ways(with_tools(false), R"(<tool_call>{"name": "f", "arguments": {"s": "}{\"]"}}</tool_call>)");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(json::parse(r.calls[0].arguments_json)["s"], "}{\"]");
}

TEST(OutputParserTools, DuplicatedParameterCloseTolerated) {
  std::string text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                     "</parameter>\n</function>\n</tool_call>";
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Paris"})");
}

TEST(OutputParserTools, TruncatedCallBecomesContent) {
  std::string text = "Sure.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar";
  ParseRun r = parse_all_ways(with_tools(false), text);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, text);
  // Streamed byte by byte, the call's first delta went out before the truncation: it is reported
  // as dropped.
  ParseRun bytes = parse_pieces(with_tools(false), text, std::vector<size_t>(text.size(), 1));
  EXPECT_EQ(bytes.dropped, std::set<int>{0});
  // Closed function but no </tool_call>: still unfinished.
  std::string t2 = "<tool_call>\n<function=get_weather>\n</function>\n";
  r = parse_all_ways(with_tools(false), t2);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, "<tool_call>\n<function=get_weather>\n</function>");
}

TEST(OutputParserTools, MalformedCallsBecomeContent) {
  const std::vector<std::string> bad = {
      "<tool_call>hello</tool_call>",
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>",  // missing </function>
      "<tool_call>\n<function=f>\ngarbage\n</function>\n</tool_call>",
      "<tool_call>\n<function=\n>\n</function>\n</tool_call>",
      "<tool_call>\n<function=f>\n</function>\ntrailing\n</tool_call>",
      "<tool_call>\n{\"name\": 1}\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\"} extra\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": [1]}\n</tool_call>",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {\n",
      "<tool_call>\n{\"name\": \"f\", </tool_call>",
      "<tool_call>",
      "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call",
  };
  for (const std::string& text : bad) {
    SCOPED_TRACE(text);
    ParseRun r = parse_all_ways(with_tools(false), text);
    EXPECT_TRUE(r.calls.empty());
    EXPECT_EQ(r.content, text.back() == '\n' ? text.substr(0, text.find_last_not_of('\n') + 1) : text);
  }
}

TEST(OutputParserTools, MalformedThenValidCall) {
  std::string good = xml_call("get_weather", {{"city", "Lima"}});
  std::string text = "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>\n" + good;
  ParseRun r = parse_all_ways(with_tools(false), text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments_json, R"({"city":"Lima"})");
  EXPECT_EQ(r.content, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</tool_call>");
}

TEST(OutputParserTools, StreamingDeltaShape) {
  OutputParser p(with_tools(false));
  EXPECT_TRUE(p.push("<tool_call>\n<function=get_wea").tool_calls.empty());
  ParsedDelta d = p.push("ther>\n<parameter=city>\nPa");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].index, 0);
  EXPECT_EQ(d.tool_calls[0].name, "get_weather");
  EXPECT_EQ(d.tool_calls[0].id.size(), 29u);
  EXPECT_EQ(d.tool_calls[0].arguments, "");
  d = p.push("ris\n</parameter>\n<parameter=days>\n");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_calls[0].id.empty());
  EXPECT_EQ(d.tool_calls[0].arguments, R"({"city":"Paris")");
  d = p.push("5\n</parameter>\n</function>\n</tool_call>");
  ASSERT_EQ(d.tool_calls.size(), 1u);
  EXPECT_EQ(d.tool_calls[0].arguments, R"(,"days":5})");
  EXPECT_TRUE(p.finish().empty());
  ASSERT_EQ(p.tool_calls().size(), 1u);
  EXPECT_EQ(p.tool_calls()[0].arguments_json, R"({"city":"Paris","days":5})");
  EXPECT_EQ(p.content(), "");
}

TEST(OutputParserTools, IdsAreUnique) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += xml_call("get_weather", {{"days", std::to_string(i)}});
  std::set<std::string> ids;
  for (int round = 0; round < 2; ++round) {
    OutputParser p(with_tools(false));
    p.push(text);
    p.finish();
    ASSERT_EQ(p.tool_calls().size(), 300u);
    for (const auto& c : p.tool_calls()) {
      EXPECT_EQ(c.id.size(), 29u);
      EXPECT_EQ(c.id.rfind("call_", 0), 0u);
      for (char ch : c.id.substr(5)) EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(ch)));
      EXPECT_TRUE(ids.insert(c.id).second) << "duplicate id " << c.id;
    }
  }
}

TEST(OutputParserTools, InvalidUtf8AndOddToolsNeverThrow) {
  ParserOptions o;
  o.tools = json::parse(R"([1, {"function": 3}, {"function": {"name": "f", "parameters": {"properties": 5}}},
                            {"name": "g", "parameters": {"properties": {"a": {"type": 7}}}}])");
  std::string text = xml_call("f", {{"a", "\xff\xfe"}}) + xml_call("g", {{"a", "12"}});
  ParseRun r = parse_all_ways(o, text);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(json::parse(r.calls[0].arguments_json)["a"], "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(r.calls[1].arguments_json, R"({"a":12})");
}

// Long arguments streamed in small pieces stay linear: a 400 kB value full of closing-tag look-alikes.
TEST(OutputParserTools, LongValuesStreamInLinearTime) {
  std::string val, str;
  for (int i = 0; i < 16000; ++i) val += "a->b </parameter> x<y> </tool_call>\n", str += "abc </tool_call> {[";
  const std::string xml = xml_call("write_file", {{"path", "p"}, {"content", val}});
  const std::string js = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"s\": \"" + str + "\"}}\n</tool_call>";
  auto t0 = std::chrono::steady_clock::now();
  for (const std::string* text : {&xml, &js}) {
    OutputParser p(with_tools(false));
    for (size_t i = 0; i < text->size(); i += 3) p.push(std::string_view(*text).substr(i, 3));
    p.finish();
    ASSERT_EQ(p.tool_calls().size(), 1u);
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
}

TEST(OutputParserTools, DeeplyNestedValueStaysAString) {
  // A reply can nest brackets far deeper than anything serialises recursively without blowing the stack:
  // past 64 levels the value is kept as the text it is.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string text = xml_call("other", {{"x", deep}, {"y", "[[1]]"}});
  ParseRun r = parse_pieces(with_tools(false), text, {});
  ASSERT_EQ(r.calls.size(), 1u);
  json args = json::parse(r.calls[0].arguments_json);
  ASSERT_TRUE(args["x"].is_string());
  EXPECT_EQ(args["x"].get<std::string>().size(), deep.size());
  EXPECT_TRUE(args["y"].is_array());
}
