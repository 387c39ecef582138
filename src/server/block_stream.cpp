#include "server/block_stream.h"

namespace lily {

void BlockSequencer::open(BlockKind k, std::vector<BlockEvent>& out, const std::string& id, const std::string& name) {
  close(out);
  open_ = true;
  kind_ = k;
  cur_ = next_++;
  tool_id_ = id;
  tool_name_ = name;
  out.push_back({BlockEvent::Open, k, cur_, "", tool_id_, tool_name_});
}

void BlockSequencer::close(std::vector<BlockEvent>& out) {
  if (!open_) return;
  out.push_back({BlockEvent::Close, kind_, cur_, "", tool_id_, tool_name_});
  open_ = false;
  tool_index_ = -1;
}

void BlockSequencer::text(BlockKind k, const std::string& s, std::vector<BlockEvent>& out) {
  if (s.empty()) return;
  if (!open_ || kind_ != k) open(k, out);
  out.push_back({BlockEvent::Delta, k, cur_, s, "", ""});
}

std::vector<BlockEvent> BlockSequencer::push(const ParsedDelta& d) {
  std::vector<BlockEvent> out;
  text(BlockKind::Reasoning, d.reasoning, out);
  text(BlockKind::Text, d.content, out);
  for (const auto& t : d.tool_calls) {
    if (!t.id.empty() || !open_ || kind_ != BlockKind::Tool || t.index != tool_index_) {
      open(BlockKind::Tool, out, t.id, t.name);
      tool_index_ = t.index;
    }
    if (!t.arguments.empty()) out.push_back({BlockEvent::Delta, BlockKind::Tool, cur_, t.arguments, tool_id_, tool_name_});
  }
  return out;
}

std::vector<BlockEvent> BlockSequencer::finish() {
  std::vector<BlockEvent> out;
  close(out);
  return out;
}

}  // namespace lily

#include "server/sse.h"

namespace lily {

std::string sse_named(const std::string& event, const nlohmann::ordered_json& data) {
  return "event: " + event + "\ndata: " + wire_json(data) + "\n\n";
}

}  // namespace lily
