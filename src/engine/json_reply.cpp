#include "engine/json_reply.h"

#include <algorithm>

namespace lily {
namespace {
constexpr std::string_view kThinkClose = "</think>";
}  // namespace

JsonReplyGate::JsonReplyGate(TokenText text, std::vector<int32_t> end_ids, bool thinking_open,
                             std::shared_ptr<const JsonSchema> schema)
    : text_(std::move(text)), end_ids_(std::move(end_ids)), in_json_(!thinking_open) {
  if (schema) body_.schema.emplace(std::move(schema));
}

bool JsonReplyGate::is_end(int32_t id) const {
  return std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end();
}

void JsonReplyGate::begin_step(int budget) {
  left_after_ = budget - 1;
  budget_rule_ = in_json_ && body_.min_close_bytes() <= budget;
}

size_t JsonReplyGate::think_split(std::string_view bytes, size_t* match_out) const {
  size_t m = think_match_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    // "</think>" has no proper prefix that is also a suffix of a longer matched part except "<".
    if (bytes[i] == kThinkClose[m]) {
      ++m;
    } else {
      m = bytes[i] == kThinkClose[0] ? 1 : 0;
    }
    if (m == kThinkClose.size()) {
      *match_out = m;
      return i + 1;
    }
  }
  *match_out = m;
  return std::string_view::npos;
}

bool JsonReplyGate::allows(int32_t id) {
  if (is_end(id)) return complete();
  const std::string bytes = text_(id);
  if (bytes.empty()) return false;
  std::string_view part = bytes;
  if (!in_json_) {
    size_t m = 0;
    const size_t at = think_split(part, &m);
    if (at == std::string_view::npos) return true;
    part.remove_prefix(at);
  }
  Body next = body_;
  next.advance(part);
  if (next.failed()) return false;
  if (budget_rule_ && next.min_close_bytes() > left_after_) {
    steered_ = true;
    return false;
  }
  return true;
}

void JsonReplyGate::accept(int32_t id) {
  if (is_end(id)) return;
  const std::string bytes = text_(id);
  std::string_view part = bytes;
  if (!in_json_) {
    size_t m = 0;
    const size_t at = think_split(part, &m);
    think_match_ = m;
    if (at == std::string_view::npos) return;
    in_json_ = true;
    part.remove_prefix(at);
  }
  body_.advance(part);
}

}  // namespace lily
