// Server building blocks: request validation, stop-string holdback, SSE framing, session cache.
#include <gtest/gtest.h>

#include "engine/stop_strings.h"
#include "server/request_parse.h"
#include "server/response_json.h"
#include "engine/session_cache.h"
#include "server/sse.h"

using namespace lily;
using json = nlohmann::json;

namespace {

int status_of(const json& body, bool chat = true) {
  try {
    if (chat) parse_chat_request(body);
    else parse_completion_request(body);
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

json chat_body() { return {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}}; }

}  // namespace

TEST(RequestParse, ValidChatRequest) {
  json b = chat_body();
  b["temperature"] = 0.5;
  b["top_p"] = 0.9;
  b["top_k"] = 40;
  b["min_p"] = 0.05;
  b["seed"] = 42;
  b["stop"] = {"a", "b"};
  b["max_completion_tokens"] = 12;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  b["prompt_cache_key"] = "k";
  b["unknown_field"] = {{"x", 1}};
  b["chat_template_kwargs"] = {{"enable_thinking", false}};
  ChatRequest r = parse_chat_request(b);
  EXPECT_FLOAT_EQ(r.opt.sampling.temperature, 0.5f);
  EXPECT_EQ(r.opt.sampling.top_k, 40);
  EXPECT_TRUE(r.opt.sampling.has_seed);
  EXPECT_EQ(r.opt.sampling.seed, 42u);
  EXPECT_EQ(r.opt.stop.size(), 2u);
  EXPECT_EQ(r.opt.max_tokens, 12);
  EXPECT_TRUE(r.opt.stream && r.opt.include_usage);
  EXPECT_EQ(r.opt.cache_key, "k");
  EXPECT_FALSE(r.enable_thinking);
}

TEST(RequestParse, MessagesNormalised) {
  json b = chat_body();
  b["messages"] = json::array({
      {{"role", "developer"}, {"content", "sys"}},
      {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
      {{"role", "assistant"},
       {"content", nullptr},
       {"reasoning_content", "think"},
       {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", "{\"x\":1}"}}}}}}},
      {{"role", "tool"}, {"tool_call_id", "c1"}, {"content", "42"}},
  });
  ChatRequest r = parse_chat_request(b);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "ab");
  EXPECT_EQ(r.messages[2]["content"], "");
  EXPECT_EQ(r.messages[2]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_EQ(r.messages[3]["tool_call_id"], "c1");
}

TEST(RequestParse, Rejections) {
  auto with = [](const char* k, json v) {
    json b = chat_body();
    b[k] = v;
    return b;
  };
  EXPECT_EQ(status_of(json::array()), 400);
  EXPECT_EQ(status_of({{"model", "m"}}), 400);                      // no messages
  EXPECT_EQ(status_of(with("messages", json::array())), 400);
  EXPECT_EQ(status_of(with("messages", {{{"role", "wizard"}, {"content", "x"}}})), 400);
  EXPECT_EQ(status_of(with("messages", {{{"role", "user"}, {"content", 5}}})), 400);
  EXPECT_EQ(status_of(with("messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}})), 400);
  EXPECT_EQ(status_of(with("n", 2)), 400);
  EXPECT_EQ(status_of(with("n", 1)), 200);
  EXPECT_EQ(status_of(with("temperature", "hot")), 400);
  EXPECT_EQ(status_of(with("temperature", 3.0)), 400);
  EXPECT_EQ(status_of(with("top_p", 1.5)), 400);
  EXPECT_EQ(status_of(with("max_tokens", 0)), 400);
  EXPECT_EQ(status_of(with("max_tokens", 2.5)), 400);
  EXPECT_EQ(status_of(with("max_tokens", -3)), 400);
  EXPECT_EQ(status_of(with("stop", 3)), 400);
  EXPECT_EQ(status_of(with("stream", "yes")), 400);
  EXPECT_EQ(status_of(with("seed", 1.5)), 400);
  EXPECT_EQ(status_of(with("response_format", {{"type", "json_schema"}})), 400);
  EXPECT_EQ(status_of(with("response_format", {{"type", "json_object"}})), 200);
  {
    json b = with("response_format", {{"type", "json_object"}});
    b["tools"] = {{{"type", "function"}, {"function", {{"name", "f"}}}}};
    b["tool_choice"] = "required";
    EXPECT_EQ(status_of(b), 400);  // the reply cannot be both a JSON object and a tool call
    b["tool_choice"] = "auto";
    EXPECT_EQ(status_of(b), 200);
  }
  EXPECT_EQ(status_of(with("tools", {{{"type", "function"}}})), 400);
  EXPECT_EQ(status_of(with("tool_choice", "required")), 400);  // no tools
  EXPECT_EQ(status_of(with("top_logprobs", 3)), 400);          // without logprobs
  EXPECT_EQ(status_of(with("chat_template_kwargs", {{"enable_thinking", "no"}})), 400);
  try {
    parse_chat_request(with("n", 3));
  } catch (const ApiError& e) {
    EXPECT_EQ(e.param, "n");
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(RequestParse, ToolChoice) {
  json b = chat_body();
  b["tools"] = {{{"type", "function"}, {"function", {{"name", "get"}, {"parameters", {{"type", "object"}}}}}}};
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get"}}}};
  ChatRequest r = parse_chat_request(b);
  EXPECT_EQ(r.tool_choice, "function");
  EXPECT_EQ(r.tool_choice_name, "get");
  b["tool_choice"] = {{"type", "function"}, {"function", {{"name", "other"}}}};
  EXPECT_EQ(status_of(b), 400);
}

TEST(RequestParse, Completions) {
  CompletionRequest r = parse_completion_request({{"model", "m"}, {"prompt", "hello"}, {"logprobs", 2}});
  EXPECT_EQ(*r.prompt, "hello");
  EXPECT_EQ(r.opt.max_tokens, 16);
  EXPECT_EQ(r.opt.top_logprobs, 2);
  r = parse_completion_request({{"prompt", {1, 2, 3}}});
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(status_of({{"prompt", 5}}, false), 400);
  EXPECT_EQ(status_of({{"prompt", {"a", "b"}}}, false), 400);
  EXPECT_EQ(status_of({{"prompt", "x"}, {"n", 2}}, false), 400);
  EXPECT_EQ(status_of({{"model", "m"}}, false), 400);
}

TEST(StopStrings, HoldsBackPossibleMatches) {
  StopMatcher m({"</end>", "STOP"});
  EXPECT_EQ(m.push("hello <").text, "hello ");
  EXPECT_EQ(m.push("/e").text, "");
  auto o = m.push("x and S");  // "</ex" can no longer match
  EXPECT_EQ(o.text, "</ex and ");
  EXPECT_FALSE(o.stopped);
  o = m.push("TOP tail");
  EXPECT_EQ(o.text, "");
  EXPECT_TRUE(o.stopped);
  EXPECT_EQ(m.push("more").text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStrings, MatchInsideOnePushAndFlush) {
  StopMatcher m({"ab"});
  auto o = m.push("xxabyy");
  EXPECT_EQ(o.text, "xx");
  EXPECT_TRUE(o.stopped);
  StopMatcher n({"abc"});
  EXPECT_EQ(n.push("zab").text, "z");
  EXPECT_EQ(n.flush(), "ab");
  StopMatcher none({});
  EXPECT_EQ(none.push("abc").text, "abc");
}

TEST(StopStrings, EarliestMatchWins) {
  StopMatcher m({"world", "lo w"});
  auto o = m.push("hello world");
  EXPECT_EQ(o.text, "hel");
  EXPECT_TRUE(o.stopped);
}

TEST(Sse, Framing) {
  nlohmann::ordered_json j = {{"a", 1}, {"b", "x\ny"}};
  EXPECT_EQ(sse_event(j), "data: {\"a\":1,\"b\":\"x\\ny\"}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("a\nb"), ": a b\n\n");
  // invalid UTF-8 (a token split inside a character) never throws
  nlohmann::ordered_json bad = {{"t", std::string("\xe4\xbd")}};
  EXPECT_EQ(sse_event(bad), "data: {\"t\":\"\xef\xbf\xbd\"}\n\n");
}

namespace {

struct FakeState final : SeqState {
  std::vector<int32_t> seen;  // what the "model" consumed
  size_t extra = 0;           // pretend bytes
  std::unique_ptr<SeqState> clone() const override { return std::make_unique<FakeState>(*this); }
  size_t bytes() const override { return seen.size() * 4 + extra; }
};

FakeState state_of(const std::vector<int32_t>& t, size_t extra = 1000) {
  FakeState s;
  s.seen = t;
  s.pos = static_cast<int>(t.size());
  s.max_ctx = 100;
  s.extra = extra;
  return s;
}

}  // namespace

TEST(SessionCache, LongestPrefixOnSnapshotBoundaries) {
  SessionCache c(1 << 20);
  std::vector<int32_t> a = {1, 2, 3}, ab = {1, 2, 3, 4, 5};
  EXPECT_TRUE(c.insert(a, "", state_of(a), {0.5f}));
  EXPECT_TRUE(c.insert(ab, "", state_of(ab), {0.25f}));
  CacheHit h = c.lookup({1, 2, 3, 4, 5, 6, 7}, "", 100);
  ASSERT_TRUE(h.state);
  EXPECT_EQ(h.n_tokens, 5);
  EXPECT_EQ(h.state->pos, 5);
  EXPECT_EQ(h.logits, std::vector<float>{0.25f});
  h = c.lookup({1, 2, 3, 4, 9}, "", 100);  // diverges inside the longer snapshot: only the shorter fits
  EXPECT_EQ(h.n_tokens, 3);
  h = c.lookup({1, 2, 3}, "", 100);  // exact match counts
  EXPECT_EQ(h.n_tokens, 3);
  h = c.lookup({1, 2}, "", 100);  // shorter than every snapshot: miss
  EXPECT_EQ(h.n_tokens, 0);
  EXPECT_FALSE(h.state);
  h = c.lookup({9, 2, 3, 4}, "", 100);
  EXPECT_FALSE(h.state);
  h = c.lookup({1, 2, 3, 4}, "", 200);  // snapshot smaller than the needed context
  EXPECT_FALSE(h.state);
}

TEST(SessionCache, HitIsAPrivateCopy) {
  SessionCache c(1 << 20);
  std::vector<int32_t> a = {1, 2};
  c.insert(a, "", state_of(a), {});
  CacheHit h = c.lookup(a, "", 1);
  static_cast<FakeState&>(*h.state).seen.push_back(7);
  CacheHit h2 = c.lookup(a, "", 1);
  EXPECT_EQ(static_cast<FakeState&>(*h2.state).seen.size(), 2u);
}

TEST(SessionCache, LruEvictionWithinBudget) {
  // each entry: 1000 extra + 4 bytes per token in state + 4 per token + 4 per logit
  SessionCache c(3000);
  auto t = [](int32_t x) { return std::vector<int32_t>{x, x + 1}; };
  for (int i = 0; i < 3; ++i) c.insert(t(i * 10), "", state_of(t(i * 10)), {1.0f});
  EXPECT_EQ(c.size(), 2u);  // 3 x 1020 > 3000
  EXPECT_FALSE(c.lookup(t(0), "", 1).state);  // oldest evicted
  EXPECT_TRUE(c.lookup(t(10), "", 1).state);  // touch 10: now 20 is the oldest
  c.insert(t(30), "", state_of(t(30)), {1.0f});
  EXPECT_TRUE(c.lookup(t(10), "", 1).state);
  EXPECT_FALSE(c.lookup(t(20), "", 1).state);
  EXPECT_LE(c.bytes(), c.budget());
  // larger than the whole budget: not stored, nothing evicted
  EXPECT_FALSE(c.insert(t(40), "", state_of(t(40), 10000), {}));
  EXPECT_EQ(c.size(), 2u);
}

TEST(SessionCache, ManyEntriesAndReplace) {
  SessionCache c(100 << 20);
  for (int i = 0; i < 200; ++i) {
    std::vector<int32_t> t = {i, i, i};
    c.insert(t, "", state_of(t, 10), {});
  }
  EXPECT_EQ(c.size(), 200u);
  std::vector<int32_t> t = {5, 5, 5};
  size_t before = c.bytes();
  c.insert(t, "", state_of(t, 10), {});
  EXPECT_EQ(c.size(), 200u);
  EXPECT_EQ(c.bytes(), before);
}

TEST(SessionCache, KeyPreferredButTokensChecked) {
  SessionCache c(1 << 20);
  std::vector<int32_t> a = {1, 2, 3};
  FakeState s1 = state_of(a), s2 = state_of(a);
  s2.extra = 2000;  // tells the two apart
  c.insert(a, "alice", s1, {});
  // same tokens replace (one snapshot per token sequence)
  c.insert(a, "bob", s2, {});
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.lookup({1, 2, 3, 4}, "alice", 1).n_tokens, 3);  // key differs, tokens match: still a hit
  c.insert({7, 8}, "alice", state_of({7, 8}), {});
  EXPECT_EQ(c.lookup({1, 2, 3}, "alice", 1).n_tokens, 3);  // key alone never matches wrong tokens
  EXPECT_FALSE(c.lookup({9}, "alice", 1).state);
}

TEST(ResponseJson, ToolCallDeltasAsTheSdkAssemblesThem) {
  ParsedDelta d;
  d.tool_calls.push_back({0, "call_abc", "get_weather", "{\"city\":"});
  d.tool_calls.push_back({0, "", "", "\"Paris\"}"});
  ojson j = chat_delta_json(d);
  ASSERT_EQ(j["tool_calls"].size(), 2u);
  const ojson& first = j["tool_calls"][0];
  EXPECT_EQ(first["index"], 0);
  EXPECT_EQ(first["id"], "call_abc");
  EXPECT_EQ(first["type"], "function");
  EXPECT_EQ(first["function"]["name"], "get_weather");
  EXPECT_EQ(first["function"]["arguments"], "{\"city\":");
  const ojson& more = j["tool_calls"][1];
  EXPECT_FALSE(more.contains("id"));
  EXPECT_FALSE(more.contains("type"));
  EXPECT_FALSE(more["function"].contains("name"));
  EXPECT_EQ(more["function"]["arguments"], "\"Paris\"}");
  EXPECT_FALSE(j.contains("content"));
}

TEST(ResponseJson, CompletionWithToolCallsAndUsage) {
  auto tok = Tokenizer::load(std::string(LILY_TEST_DIR) + "/../demo/tiny-model/tokenizer.json");
  GenResult r;
  r.finish_reason = "tool_calls";
  r.prompt_tokens = 10;
  r.cached_tokens = 4;
  r.completion_tokens = 5;
  r.reasoning = "thinking";
  r.tool_calls.push_back({"call_1", "f", "{\"a\":1}"});
  ojson j = chat_completion_json({"chatcmpl-x", 123, "m"}, r, nullptr, *tok);
  EXPECT_EQ(j["object"], "chat.completion");
  const ojson& m = j["choices"][0]["message"];
  EXPECT_EQ(m["role"], "assistant");
  EXPECT_TRUE(m["content"].is_null());
  EXPECT_EQ(m["reasoning_content"], "thinking");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_EQ(j["usage"]["total_tokens"], 15);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  ojson chunk = chat_chunk_json({"chatcmpl-x", 123, "m"}, ojson::object(), "stop", nullptr, true);
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(chunk["usage"].is_null());
  ojson u = usage_chunk_json({"chatcmpl-x", 123, "m"}, "chat.completion.chunk", r);
  EXPECT_TRUE(u["choices"].empty());
}

TEST(ResponseJson, ErrorShape) {
  ojson e = error_json(ApiError(404, "no such model", "model", "model_not_found"));
  EXPECT_EQ(e["error"]["message"], "no such model");
  EXPECT_EQ(e["error"]["type"], "not_found_error");
  EXPECT_EQ(e["error"]["param"], "model");
  EXPECT_EQ(e["error"]["code"], "model_not_found");
  ojson b = error_json(bad_request("bad"));
  EXPECT_TRUE(b["error"]["param"].is_null());
  EXPECT_TRUE(b["error"]["code"].is_null());
}
