// Test harness for OutputParser: feeds text split in various ways and checks the streaming
// invariants (deltas concatenate to the final fields, first delta of a call has id and name, the
// final result does not depend on the split points).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "chat/output_parser.h"

namespace lily::testing {

struct ParseRun {
  std::string reasoning, content;
  std::vector<ToolCallOut> calls;
  std::vector<ParsedDelta> deltas;
  std::set<int> dropped;
};

// Feeds `text` in pieces of the given sizes (the rest in one piece), then finish(). Checks the
// delta invariants with gtest expectations.
inline ParseRun parse_pieces(const ParserOptions& opt, const std::string& text, const std::vector<size_t>& sizes) {
  OutputParser p(opt);
  ParseRun run;
  size_t at = 0;
  for (size_t n : sizes) {
    if (at >= text.size()) break;
    n = std::min(n, text.size() - at);
    run.deltas.push_back(p.push(std::string_view(text).substr(at, n)));
    at += n;
  }
  if (at < text.size()) run.deltas.push_back(p.push(std::string_view(text).substr(at)));
  run.deltas.push_back(p.finish());
  EXPECT_TRUE(p.finish().empty());
  EXPECT_TRUE(p.push("more").empty());

  std::string r, c;
  std::map<int, ToolCallOut> assembled;
  for (const ParsedDelta& d : run.deltas) {
    r += d.reasoning;
    c += d.content;
    for (int i : d.dropped_tool_calls) {
      EXPECT_TRUE(assembled.count(i)) << "dropped index " << i << " was never sent";
      EXPECT_TRUE(run.dropped.insert(i).second);
    }
    for (const auto& t : d.tool_calls) {
      EXPECT_FALSE(run.dropped.count(t.index)) << "index " << t.index << " reused after drop";
      auto it = assembled.find(t.index);
      if (it == assembled.end()) {
        EXPECT_FALSE(t.id.empty()) << "first delta of a call needs an id";
        EXPECT_FALSE(t.name.empty()) << "first delta of a call needs a name";
        assembled[t.index] = {t.id, t.name, t.arguments};
      } else {
        EXPECT_TRUE(t.id.empty() && t.name.empty()) << "id/name repeated for index " << t.index;
        it->second.arguments_json += t.arguments;
      }
    }
  }
  EXPECT_EQ(r, p.reasoning());
  EXPECT_EQ(c, p.content());
  std::vector<ToolCallOut> streamed;
  for (auto& [i, call] : assembled)
    if (!run.dropped.count(i)) streamed.push_back(call);
  EXPECT_EQ(streamed.size(), p.tool_calls().size());
  for (size_t i = 0; i < std::min(streamed.size(), p.tool_calls().size()); ++i) {
    EXPECT_EQ(streamed[i].id, p.tool_calls()[i].id);
    EXPECT_EQ(streamed[i].name, p.tool_calls()[i].name);
    EXPECT_EQ(streamed[i].arguments_json, p.tool_calls()[i].arguments_json);
  }
  run.reasoning = p.reasoning();
  run.content = p.content();
  run.calls = p.tool_calls();
  return run;
}

inline void expect_same_result(const ParseRun& a, const ParseRun& b, const std::string& how) {
  EXPECT_EQ(a.reasoning, b.reasoning) << how;
  EXPECT_EQ(a.content, b.content) << how;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << how;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << how;
    EXPECT_EQ(a.calls[i].arguments_json, b.calls[i].arguments_json) << how;
  }
}

// Parses `text` whole, one byte at a time, and in random chunks (fixed seeds); all must agree.
// Returns the whole-string result.
inline ParseRun parse_all_ways(const ParserOptions& opt, const std::string& text) {
  ParseRun whole = parse_pieces(opt, text, {});
  expect_same_result(whole, parse_pieces(opt, text, std::vector<size_t>(text.size(), 1)), "byte by byte");
  for (unsigned seed : {1u, 7u, 42u}) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<size_t> len(1, 9);
    std::vector<size_t> sizes;
    for (size_t at = 0; at < text.size();) sizes.push_back(len(rng)), at += sizes.back();
    expect_same_result(whole, parse_pieces(opt, text, sizes), "random chunks, seed " + std::to_string(seed));
  }
  // Every single split point.
  for (size_t cut = 1; cut < text.size(); ++cut)
    expect_same_result(whole, parse_pieces(opt, text, {cut}), "split at " + std::to_string(cut));
  return whole;
}

inline ParserOptions thinking_on() {
  ParserOptions o;
  o.thinking_open_at_start = true;
  return o;
}

}  // namespace lily::testing
