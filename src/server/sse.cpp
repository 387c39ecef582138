#include "server/sse.h"

namespace lily {

std::string wire_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string wire_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& j) { return "data: " + wire_json(j) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(const std::string& text) {
  std::string t = ": ";
  for (char c : text) t += (c == '\n' || c == '\r') ? ' ' : c;
  return t + "\n\n";
}

}  // namespace lily
