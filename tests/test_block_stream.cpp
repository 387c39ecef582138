// BlockSequencer: the parser's deltas as typed blocks (what the Anthropic and Responses streams send),
// for a reply whose tool call opens inside the reasoning block and is followed by a parallel call.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/output_parser.h"
#include "server/block_stream.h"

using namespace lily;

namespace {

struct Block {
  BlockKind kind;
  std::string text, id, name;
  bool closed = false;
};

// Feeds `text` to a parser in pieces of `step` bytes; checks the event grammar and returns the blocks.
std::vector<Block> run(const std::string& text, size_t step) {
  ParserOptions o;
  o.thinking_open_at_start = true;
  o.tools = nlohmann::json::parse(R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
                                      {"type":"function","function":{"name":"get_time","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}])");
  OutputParser p(o);
  BlockSequencer seq;
  std::vector<Block> blocks;
  auto apply = [&](const std::vector<BlockEvent>& evs) {
    for (const auto& e : evs) {
      if (e.type == BlockEvent::Open) {
        EXPECT_EQ(e.block, static_cast<int>(blocks.size()));
        EXPECT_TRUE(blocks.empty() || blocks.back().closed) << "blocks do not overlap";
        blocks.push_back({e.kind, "", e.tool_id, e.tool_name});
        continue;
      }
      EXPECT_EQ(e.block, static_cast<int>(blocks.size()) - 1);
      EXPECT_EQ(e.kind, blocks.back().kind);
      EXPECT_FALSE(blocks.back().closed);
      if (e.type == BlockEvent::Delta) blocks.back().text += e.text;
      else blocks.back().closed = true;
    }
  };
  for (size_t i = 0; i < text.size(); i += step) apply(seq.push(p.push(text.substr(i, step))));
  apply(seq.push(p.finish()));
  apply(seq.finish());
  return blocks;
}

}  // namespace

TEST(BlockStream, CallInsideReasoningThenParallelCall) {
  const std::string text =
      "I should check the weather.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
      "</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=city>\nOslo\n</parameter>\n"
      "</function>\n</tool_call>";
  for (size_t step : {1u, 3u, 7u, 1000u}) {
    const auto b = run(text, step);
    ASSERT_EQ(b.size(), 3u) << "step " << step;
    EXPECT_EQ(b[0].kind, BlockKind::Reasoning);
    EXPECT_EQ(b[0].text, "I should check the weather.");
    for (int i : {1, 2}) {
      EXPECT_EQ(b[i].kind, BlockKind::Tool);
      EXPECT_TRUE(b[i].closed);
      EXPECT_EQ(b[i].id.rfind("call_", 0), 0u);
      EXPECT_EQ(nlohmann::json::parse(b[i].text), nlohmann::json::parse(R"({"city":"Oslo"})"));
    }
    EXPECT_EQ(b[1].name, "get_weather");
    EXPECT_EQ(b[2].name, "get_time");
    EXPECT_NE(b[1].id, b[2].id);
  }
}

TEST(BlockStream, ReasoningThenText) {
  const auto b = run("Think.\n</think>\n\nHello **there**", 2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].kind, BlockKind::Reasoning);
  EXPECT_EQ(b[0].text, "Think.");
  EXPECT_EQ(b[1].kind, BlockKind::Text);
  EXPECT_EQ(b[1].text, "Hello **there**");
  EXPECT_TRUE(b[1].closed);
}
