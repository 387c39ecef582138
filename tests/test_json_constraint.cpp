// response_format json_object: the byte-level JSON prefix validator, the token-level gate (reasoning
// block, end of turn, budget) and constrained sampling with logits that prefer invalid tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/json_constraint.h"
#include "engine/json_reply.h"
#include "engine/sampler.h"

using namespace lily;

namespace {

bool valid_prefix(std::string_view s) { return JsonConstraint().accepts(s); }

bool complete(std::string_view s) {
  JsonConstraint c;
  c.advance(s);
  return c.complete();
}

const std::vector<std::string> kValid = {
    "{}",
    "  \n{ }",
    "{\"a\":1}",
    "{\"a\" : [1, -0.5e+3, 0, -0, 1E5, 2.25, 10e-2, 3e7, true, false, null, {\"b\": {}}, [], [[]]]}",
    "{\"s\":\"x\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\uD83D\\uDE00 end\"}",
    "{\"\xC3\xA9t\xC3\xA9\":\"\xE2\x82\xAC \xF0\x9F\x98\x80 \xE4\xB8\xAD\", \"\":\"\"}",
    "{\"nested\":{\"a\":{\"b\":[{\"c\":[1,{\"d\":null}]}]}},\"z\":-12.5E-3}\r\n\t ",
};

}  // namespace

TEST(JsonConstraint, EveryPrefixOfValidObjectsIsAccepted) {
  for (const std::string& doc : kValid) {
    ASSERT_TRUE(nlohmann::json::accept(doc)) << doc;  // the fixtures themselves are JSON
    JsonConstraint c;
    for (size_t i = 0; i < doc.size(); ++i) {
      EXPECT_TRUE(valid_prefix(doc.substr(0, i + 1))) << doc << " at " << i;
      EXPECT_TRUE(c.accepts(doc.substr(i, 1))) << doc << " at " << i;
      c.advance(doc.substr(i, 1));
      EXPECT_FALSE(c.failed());
    }
    EXPECT_TRUE(c.complete()) << doc;
    EXPECT_TRUE(c.accepts("  \n"));
    EXPECT_FALSE(c.accepts("x"));
    EXPECT_FALSE(c.accepts("{}"));
    // Split anywhere: the same result.
    for (size_t cut = 0; cut <= doc.size(); ++cut) {
      JsonConstraint d;
      d.advance(doc.substr(0, cut));
      EXPECT_TRUE(d.accepts(doc.substr(cut)));
      d.advance(doc.substr(cut));
      EXPECT_TRUE(d.complete());
    }
  }
}

TEST(JsonConstraint, CompleteOnlyAtTheEnd) {
  EXPECT_FALSE(complete(""));
  EXPECT_FALSE(complete("{"));
  EXPECT_FALSE(complete("{\"a\":{}"));
  EXPECT_FALSE(complete("{\"a\":1"));  // a number is open until its terminator
  EXPECT_TRUE(complete("{\"a\":1}"));
  EXPECT_TRUE(complete("{\"a\":{}} "));
}

TEST(JsonConstraint, InvalidPrefixes) {
  const std::vector<std::string> bad = {
      "[]", "\"a\"", "1", "x", "true", "{\"a\"}", "{\"a\":}", "{,}", "{\"a\":1,}", "{\"a\":01", "{\"a\":-}",
      "{\"a\":1.}", "{\"a\":1e}", "{\"a\":.5", "{\"a\":+1", "{\"a\":tru}", "{\"a\":nul ", "{\"a\":\"\\x",
      "{\"a\":\"\\u12g", "{\"a\":\"\n", "{\"a\":\"\t", "{\"a\":[1}", "{\"a\":{]", "{} x", "{}{", "{a", "{'a'",
      "{\"a\" 1", "{\"a\"::", "{\"a\":[,", "{\"a\":[1,]", "{\"a\":1 2", "{\"a\":--1", "{\"a\":1.2.3",
      "{\"a\":1e+-2", "{\"a\":-a", "{}}", "{\"a\":\"x\"\"",
      // surrogate escapes: a low one alone, a high one not followed by a low one
      "{\"a\":\"\\uDC", "{\"a\":\"\\udfff", "{\"a\":\"\\uD83Dx", "{\"a\":\"\\uD83D\"", "{\"a\":\"\\uD83D\\n",
      "{\"a\":\"\\uD83D\\u0", "{\"a\":\"\\uD83D\\uD8",
      // UTF-8: overlong, surrogate, above U+10FFFF, lone continuation, truncated then ASCII, in non-strings
      "{\"\xC0\x80", "{\"\xC1", "{\"\xE0\x80", "{\"\xED\xA0\x80", "{\"\xF0\x80", "{\"\xF4\x90", "{\"\xF5",
      "{\"\x80", "{\"\xC3" "A", "{\xC3\xA9",
  };
  for (const std::string& s : bad) {
    EXPECT_FALSE(valid_prefix(s)) << s;
    JsonConstraint c;
    c.advance(s);
    EXPECT_TRUE(c.failed()) << s;
    EXPECT_FALSE(c.accepts(""));  // failed stays failed
    EXPECT_FALSE(c.accepts("}"));
    EXPECT_EQ(c.min_close_bytes(), JsonConstraint::kUnreachable);
  }
  // Valid as prefixes although they look odd.
  for (const char* s : {"{\"a\":tru", "{\"a\":-", "{\"a\":1e", "{\"a\":\"\\u12", "{\"\xF0\x9F", "{\"a\":[[[", "\r\n{",
                  "{\"a\":\"\\uD", "{\"a\":\"\\ud7ff\\uDBFF\\uDC", "{\"a\":\"\\uD83D\\"})
    EXPECT_TRUE(valid_prefix(s)) << s;
}

TEST(JsonConstraint, DepthLimit) {
  std::string s = "{\"a\":";
  for (int i = 1; i < JsonConstraint::kMaxDepth; ++i) s += "[";
  JsonConstraint c;
  c.advance(s);
  EXPECT_EQ(c.depth(), JsonConstraint::kMaxDepth);
  EXPECT_FALSE(c.accepts("["));
  EXPECT_FALSE(c.accepts("{"));
  EXPECT_TRUE(c.accepts("1"));
  c.advance(std::string(JsonConstraint::kMaxDepth - 1, ']') + "}");
  EXPECT_TRUE(c.complete());
}

// min_close_bytes() is exact: no byte lowers it by more than one (so it is a lower bound on any
// completion), and following bytes that lower it by one reaches a whole object in exactly that many.
TEST(JsonConstraint, MinCloseBytesIsExact) {
  std::vector<std::string> prefixes;
  for (const std::string& doc : kValid)
    for (size_t i = 0; i <= doc.size(); ++i) prefixes.push_back(doc.substr(0, i));
  for (const char* s : {"{\"a\":tru", "{\"a\":-", "{\"a\":1e", "{\"a\":1e-", "{\"a\":\"\\u1", "{\"\xF0\x9F", "{\"a\":[[{",
                        "{\"a\":\"\\uD", "{\"a\":\"\\uDB", "{\"a\":\"\\uDBFF", "{\"a\":\"\\uDBFF\\", "{\"a\":\"\\uDBFF\\u"})
    prefixes.push_back(s);
  for (const std::string& p : prefixes) {
    JsonConstraint c;
    c.advance(p);
    ASSERT_FALSE(c.failed()) << p;
    const int cost = c.min_close_bytes();
    for (int b = 0; b < 256; ++b) {
      const char ch = static_cast<char>(b);
      if (!c.accepts(std::string_view(&ch, 1))) continue;
      JsonConstraint d = c;
      d.advance(std::string_view(&ch, 1));
      EXPECT_GE(d.min_close_bytes(), cost - 1) << p << " + byte " << b;
    }
    std::string out = p;
    for (int k = 0; k < cost; ++k) {
      bool found = false;
      for (int b = 0; b < 256 && !found; ++b) {
        const char ch = static_cast<char>(b);
        JsonConstraint d = c;
        d.advance(std::string_view(&ch, 1));
        if (!d.failed() && d.min_close_bytes() == cost - k - 1) {
          c = d;
          out += ch;
          found = true;
        }
      }
      ASSERT_TRUE(found) << p << " after " << k;
    }
    EXPECT_TRUE(c.complete()) << out;
    EXPECT_TRUE(nlohmann::json::accept(out)) << out;
  }
}

// ---- token level ----

namespace {

// Vocabulary: ids 0..255 are the single bytes; then a few longer tokens, an end-of-turn and a special one.
constexpr int32_t kHello = 256, kQuoteClose = 257, kOpenKey = 258, kThink = 259, kEnd = 260, kSpecial = 261,
                  kThinkOpenBrace = 262, kBigOpen = 263;
constexpr int kVocab = 264;

std::string text_of(int32_t id) {
  if (id < 256) return std::string(1, static_cast<char>(id));
  switch (id) {
    case kHello: return "hello";
    case kQuoteClose: return "\"}";
    case kOpenKey: return "{\"";
    case kThink: return "</think>";
    case kEnd: return "<|im_end|>";
    case kThinkOpenBrace: return "k>\n{";
    case kBigOpen: return "[[[[";
    default: return "";  // special
  }
}

JsonReplyGate make_gate(bool thinking = false) { return JsonReplyGate(text_of, {kEnd}, thinking); }

// Runs a constrained generation over fixed logits (the same every step) like Generator does.
struct GenRun {
  std::string text;
  bool complete = false, steered = false;
};
GenRun generate(const SamplerParams& p, const std::vector<float>& logits, int budget) {
  Sampler s(p, {});
  JsonReplyGate g = make_gate();
  GenRun r;
  for (int i = 0; i < budget && !g.complete(); ++i) {
    g.begin_step(budget - i);
    SampleResult x = s.sample(logits.data(), kVocab, [&g](int32_t id) { return g.allows(id); });
    EXPECT_FALSE(x.rejected);
    EXPECT_NE(x.id, kEnd);
    g.accept(x.id);
    s.accept(x.id);
    r.text += text_of(x.id);
  }
  r.complete = g.complete();
  r.steered = g.steered();
  return r;
}

// Logits that favour what JSON forbids: end of turn, letters, specials, closers in the wrong place.
std::vector<float> hostile_logits() {
  std::vector<float> l(kVocab, 0.0f);
  l[kEnd] = 10;
  l[kSpecial] = 9.5f;
  l[kHello] = 9;
  l['x'] = 8.5f;
  l[']'] = 8;
  l[','] = 7;
  l['}'] = 6;
  l['a'] = 5.5f;
  l['"'] = 5;
  l[':'] = 4.5f;
  l['['] = 4;
  l['{'] = 3;
  l['1'] = 2;
  return l;
}

}  // namespace

TEST(JsonReplyGate, TokensAndEndOfTurn) {
  JsonReplyGate g = make_gate();
  g.begin_step(100);
  EXPECT_FALSE(g.allows(kEnd));
  EXPECT_FALSE(g.allows(kSpecial));
  EXPECT_FALSE(g.allows(kHello));
  EXPECT_TRUE(g.allows(kOpenKey));
  EXPECT_TRUE(g.allows(' '));
  g.accept(kOpenKey);
  g.begin_step(99);
  EXPECT_TRUE(g.allows(kHello));
  EXPECT_FALSE(g.allows(kQuoteClose));  // {""} is not valid: a key needs a value
  EXPECT_TRUE(g.allows(0xC3));         // half of a UTF-8 character
  g.accept(0xC3);
  g.begin_step(98);
  EXPECT_FALSE(g.allows('a'));
  EXPECT_TRUE(g.allows(0xA9));
  for (int32_t id : {0xA9, static_cast<int>('"'), static_cast<int>(':'), static_cast<int>('1')}) {
    g.begin_step(90);
    ASSERT_TRUE(g.allows(id));
    g.accept(id);
  }
  g.begin_step(80);
  EXPECT_FALSE(g.allows(kEnd));
  EXPECT_FALSE(g.allows(kQuoteClose));
  EXPECT_TRUE(g.allows('}'));
  g.accept('}');
  EXPECT_TRUE(g.complete());
  EXPECT_TRUE(g.allows(kEnd));
  EXPECT_FALSE(g.steered());
}

TEST(JsonReplyGate, JsonStartsAfterTheReasoningBlock) {
  JsonReplyGate g = make_gate(true);
  g.begin_step(100);
  EXPECT_FALSE(g.in_json());
  EXPECT_TRUE(g.allows(kHello));     // free text while thinking
  EXPECT_FALSE(g.allows(kEnd));      // but the turn cannot end there
  EXPECT_FALSE(g.allows(kSpecial));
  g.accept(kHello);
  g.accept('<');
  g.accept('/');
  g.accept('t');
  g.accept('h');
  g.accept('i');
  g.accept('n');
  EXPECT_FALSE(g.in_json());
  g.begin_step(90);
  EXPECT_TRUE(g.allows(kThinkOpenBrace));  // "k>" ends "</think>", then "\n{" starts the object
  g.accept(kThinkOpenBrace);
  EXPECT_TRUE(g.in_json());
  EXPECT_EQ(g.body().json.depth(), 1);
  g.begin_step(80);
  EXPECT_FALSE(g.allows(kHello));
  EXPECT_TRUE(g.allows('}'));

  JsonReplyGate h = make_gate(true);
  h.accept('<');
  h.accept('<');  // "<<" then "/think>": still matches
  h.begin_step(50);
  EXPECT_TRUE(h.allows(kHello));
  h.accept('/');
  for (char ch : std::string("think>")) h.accept(static_cast<unsigned char>(ch));
  EXPECT_TRUE(h.in_json());
  h.begin_step(50);
  EXPECT_FALSE(h.allows(kHello));
}

TEST(JsonReplyGate, BudgetRuleClosesInTime) {
  JsonReplyGate g = make_gate();
  g.begin_step(6);
  EXPECT_FALSE(g.allows(kBigOpen));  // not a value at the top level anyway
  g.accept('{');
  g.begin_step(5);
  EXPECT_TRUE(g.allows('"'));  // {" still needs ":0} = 4 bytes, and 4 tokens are left after it
  g.accept('"');
  g.begin_step(4);
  EXPECT_FALSE(g.steered());
  EXPECT_FALSE(g.allows(kHello));  // {"hello needs ":0} = 4 bytes, only 3 tokens left after it
  EXPECT_TRUE(g.steered());
  EXPECT_TRUE(g.allows('"'));
}

TEST(ConstrainedSampler, GreedyPicksTheBestValidToken) {
  SamplerParams p;
  p.temperature = 0;
  GenRun r = generate(p, hostile_logits(), 200);
  EXPECT_TRUE(r.complete) << r.text;
  EXPECT_TRUE(nlohmann::json::accept(r.text)) << r.text;
  // Greedy: '{' (the only way to start), then '}' outranks '"' and closes at once.
  EXPECT_EQ(r.text, "{}");
  EXPECT_FALSE(r.steered);
}

TEST(ConstrainedSampler, SamplingStaysValidAndDeterministic) {
  SamplerParams p;
  p.has_seed = true;
  std::vector<float> l = hostile_logits();
  for (int i = 0; i < 256; ++i) l[i] += 0.5f * static_cast<float>((i * 37) % 11) - 2;  // noise on every byte
  int complete = 0, natural = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    p.seed = seed;
    GenRun a = generate(p, l, 60), b = generate(p, l, 60);
    EXPECT_EQ(a.text, b.text) << "seed " << seed;
    ASSERT_TRUE(a.complete) << a.text;  // the budget rule closes it in time
    EXPECT_TRUE(nlohmann::json::accept(a.text)) << a.text;
    complete += a.complete;
    natural += !a.steered;
  }
  EXPECT_EQ(complete, 40);
  EXPECT_GT(natural, 0);  // some close on their own, before the budget forces it
}

TEST(ConstrainedSampler, FilterReachesBeyondTopK) {
  SamplerParams p;
  p.has_seed = true;
  p.seed = 7;
  p.top_k = 3;
  p.top_p = 0.9f;
  std::vector<float> l = hostile_logits();  // top 3: end, special, "hello" — all invalid at the start
  Sampler s(p, {});
  JsonReplyGate g = make_gate();
  g.begin_step(100);
  SampleResult x = s.sample(l.data(), kVocab, [&g](int32_t id) { return g.allows(id); });
  EXPECT_EQ(x.id, '{');  // the best valid token of the whole vocabulary
  EXPECT_FALSE(x.rejected);
  EXPECT_NEAR(x.logprob, l['{'] - std::log(std::exp(10.0) + std::exp(9.5) + std::exp(9) + std::exp(8.5) +
                                              std::exp(8) + std::exp(7) + std::exp(6) + std::exp(5.5) +
                                              std::exp(5) + std::exp(4.5) + std::exp(4) + std::exp(3) +
                                              std::exp(2) + (kVocab - 13)),
              1e-3);

  int calls = 0;
  SampleResult none = s.sample(l.data(), kVocab, [&calls](int32_t) { return ++calls, false; });
  EXPECT_TRUE(none.rejected);
  EXPECT_EQ(none.id, kEnd);  // the argmax
  EXPECT_GE(calls, kVocab);
}

TEST(ConstrainedSampler, UnfilteredDrawsUnchanged) {
  // Without a filter the sampler draws exactly as before; with an always-true filter, too.
  SamplerParams p;
  p.has_seed = true;
  p.seed = 3;
  std::vector<float> l(500);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::cos(i * 0.91) * 2);
  Sampler a(p, {}), b(p, {});
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(a.sample(l.data(), 500).id, b.sample(l.data(), 500, [](int32_t) { return true; }).id);
}

TEST(JsonConstraint, WhitespaceRunsAreBounded) {
  const std::string run(JsonConstraint::kMaxWhitespaceRun, ' ');
  EXPECT_TRUE(valid_prefix(run + "{" + run + "\"a\"" + run + ":" + run + "1" + run + "}" + run));
  EXPECT_FALSE(valid_prefix(run + " "));
  EXPECT_FALSE(valid_prefix("{\"a\":[1," + run + "\n"));
  EXPECT_FALSE(valid_prefix("{\"a\":1" + run + "\t"));
  EXPECT_TRUE(valid_prefix("{\"a\":\"" + run + run + "\"}"));  // inside strings it is text
}
