// Turns the output parser's streamed deltas (reasoning, content, tool-call pieces) into a sequence of
// typed output blocks, opened, filled and closed one at a time: the shape both the Anthropic Messages
// stream (content_block_start / _delta / _stop) and the OpenAI Responses stream (output_item.added /
// *.delta / output_item.done) need. Within one delta the parser's order is reasoning, content, tool calls.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/output_parser.h"

namespace lily {

enum class BlockKind { Reasoning, Text, Tool };

struct BlockEvent {
  enum Type { Open, Delta, Close } type;
  BlockKind kind;
  int block = 0;         // 0-based position of the block in the reply's output
  std::string text;      // Delta: the text (Tool: a piece of the arguments JSON)
  std::string tool_id;   // Tool: the call's id (every event)
  std::string tool_name; // Tool: the function name (every event)
};

class BlockSequencer {
 public:
  // Events for one parser delta; empty text pieces produce nothing.
  std::vector<BlockEvent> push(const ParsedDelta& d);
  // Closes the open block (if any). Call once at the end of the reply.
  std::vector<BlockEvent> finish();
  int blocks() const { return next_; }  // blocks opened so far

 private:
  void open(BlockKind k, std::vector<BlockEvent>& out, const std::string& id = "", const std::string& name = "");
  void close(std::vector<BlockEvent>& out);
  void text(BlockKind k, const std::string& s, std::vector<BlockEvent>& out);

  bool open_ = false;
  BlockKind kind_ = BlockKind::Text;
  int cur_ = -1;           // index of the open block
  int next_ = 0;
  int tool_index_ = -1;    // the parser's index of the open tool call
  std::string tool_id_, tool_name_;
};

}  // namespace lily

namespace lily {

// A named server-sent event: "event: NAME\ndata: JSON\n\n" (the Anthropic and Responses streams).
std::string sse_named(const std::string& event, const nlohmann::ordered_json& data);

}  // namespace lily
