// OutputParser: reasoning/content split and streaming behaviour.
#include <gtest/gtest.h>

#include "output_parser_harness.h"

using namespace lily;
using namespace lily::testing;

TEST(OutputParserReasoning, OpenAtStartSplitsAtClose) {
  ParseRun r = parse_all_ways(thinking_on(), "Let me think.\nStep two.\n</think>\n\nThe answer is 4.");
  EXPECT_EQ(r.reasoning, "Let me think.\nStep two.");
  EXPECT_EQ(r.content, "The answer is 4.");
  EXPECT_TRUE(r.calls.empty());
}

TEST(OutputParserReasoning, ExplicitOpenTag) {
  ParseRun r = parse_all_ways(ParserOptions{}, "<think>\nhmm, 2+2\n</think>\n\nFour.");
  EXPECT_EQ(r.reasoning, "hmm, 2+2");
  EXPECT_EQ(r.content, "Four.");
  // Leading newlines before the open tag are allowed.
  r = parse_all_ways(ParserOptions{}, "\n<think>x</think>y");
  EXPECT_EQ(r.reasoning, "x");
  EXPECT_EQ(r.content, "y");
}

TEST(OutputParserReasoning, OpenTagRepeatedAfterPromptOpenedIt) {
  ParseRun r = parse_all_ways(thinking_on(), "<think>\nhmm\n</think>\n\nHi");
  EXPECT_EQ(r.reasoning, "hmm");
  EXPECT_EQ(r.content, "Hi");
}

TEST(OutputParserReasoning, NeverClosedIsAllReasoning) {
  ParseRun r = parse_all_ways(thinking_on(), "still thinking\nabout </thin");
  EXPECT_EQ(r.reasoning, "still thinking\nabout </thin");
  EXPECT_EQ(r.content, "");
  r = parse_all_ways(thinking_on(), "trailing newlines\n\n");
  EXPECT_EQ(r.reasoning, "trailing newlines");
}

TEST(OutputParserReasoning, ThinkingOffNothingMisfiled) {
  ParseRun r = parse_all_ways(ParserOptions{}, "Hello <think> world </think> bye");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hello <think> world </think> bye");
  // A stray close tag at the very start (the prompt already closed the block) is dropped.
  r = parse_all_ways(ParserOptions{}, "</think>\n\nHello");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Hello");
  r = parse_all_ways(ParserOptions{}, "Answer: x < y, a </b> c <thin");
  EXPECT_EQ(r.content, "Answer: x < y, a </b> c <thin");
}

TEST(OutputParserReasoning, EmptyThinkBlock) {
  ParseRun r = parse_all_ways(ParserOptions{}, "<think>\n\n</think>\n\nAnswer");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Answer");
  r = parse_all_ways(thinking_on(), "\n</think>\n\nAnswer");
  EXPECT_EQ(r.reasoning, "");
  EXPECT_EQ(r.content, "Answer");
}

TEST(OutputParserReasoning, InnerNewlinesKeptOuterStripped) {
  ParseRun r = parse_all_ways(thinking_on(), "\na\n\nb\n</think>\n\nc\n\nd\n");
  EXPECT_EQ(r.reasoning, "a\n\nb");
  EXPECT_EQ(r.content, "c\n\nd");
}

TEST(OutputParserReasoning, OpenTagLaterInContentIsText) {
  ParseRun r = parse_all_ways(thinking_on(), "r</think>\n\nUse <think> tags like <think>this</think>.");
  EXPECT_EQ(r.reasoning, "r");
  EXPECT_EQ(r.content, "Use <think> tags like <think>this</think>.");
}

TEST(OutputParserStream, HoldsBackPossibleTagPrefix) {
  OutputParser p(thinking_on());
  EXPECT_EQ(p.push("abc</th").reasoning, "abc");
  ParsedDelta d = p.push("ink>\n\nHel");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Hel");
  d = p.push("lo <tool_");
  EXPECT_EQ(d.content, "lo ");
  d = p.push("calls are fun\n");
  EXPECT_EQ(d.content, "<tool_calls are fun");  // not a tag after all; trailing newline held
  d = p.push("!");
  EXPECT_EQ(d.content, "\n!");
  EXPECT_TRUE(p.finish().empty());
  EXPECT_EQ(p.content(), "Hello <tool_calls are fun\n!");
}

TEST(OutputParserStream, FinishFlushesHeldText) {
  OutputParser p(ParserOptions{});
  EXPECT_EQ(p.push("a <tool_c").content, "a ");
  EXPECT_EQ(p.finish().content, "<tool_c");
  EXPECT_EQ(p.content(), "a <tool_c");
}

TEST(OutputParserStream, ToolCallsOffLeavesTagsAsText) {
  ParserOptions o;
  o.parse_tool_calls = false;
  std::string text = "<tool_call>\n<function=f>\n</function>\n</tool_call>";
  ParseRun r = parse_all_ways(o, text);
  EXPECT_EQ(r.content, text);
  EXPECT_TRUE(r.calls.empty());
}

TEST(OutputParserStream, Utf8SplitInsideCharacters) {
  ParseRun r = parse_all_ways(thinking_on(), "思考中…\n</think>\n\n答案是「四」。");
  EXPECT_EQ(r.reasoning, "思考中…");
  EXPECT_EQ(r.content, "答案是「四」。");
}

// Random sequences of tag fragments: never throws, invariants and split independence hold.
TEST(OutputParserStream, FuzzedTagSoup) {
  const std::vector<std::string> atoms = {
      "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=f>", "<function=get_weather>",
      "</function>", "<parameter=a>", "<parameter=city>", "</parameter>", "\n", "\n\n", " ", "x", "42",
      "<", "</", "{", "}", "\"", "{\"name\": \"f\", \"arguments\": {}}", "<tool", "</think", "é"};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 150; ++iter) {
    std::string text;
    int n = std::uniform_int_distribution<int>(1, 30)(rng);
    for (int i = 0; i < n; ++i) text += atoms[std::uniform_int_distribution<size_t>(0, atoms.size() - 1)(rng)];
    ParserOptions o;
    o.thinking_open_at_start = iter % 2 == 0;
    SCOPED_TRACE(text);
    parse_all_ways(o, text);
  }
}
