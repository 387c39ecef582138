#include "server/json_limits.h"

#include "server/request_parse.h"

namespace lily {

int json_nesting_depth(std::string_view text, int stop_at) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > stop_at) return deepest;
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

namespace {

template <class J>
J parse_limited(std::string_view text, const std::string& what, const std::string& param) {
  if (json_nesting_depth(text) > kMaxJsonDepth)
    throw ApiError(400,
                   what + " nests arrays/objects deeper than " + std::to_string(kMaxJsonDepth) +
                       " levels (the server's JSON nesting limit)",
                   param, "json_too_deep");
  try {
    return J::parse(text.begin(), text.end());
  } catch (const nlohmann::json::out_of_range& e) {  // 1e400: a number no double holds
    throw ApiError(400, what + " holds a number out of range: " + e.what(), param, "invalid_json");
  } catch (const nlohmann::json::exception& e) {
    throw ApiError(400, what + " is not valid JSON: " + e.what(), param, "invalid_json");
  }
}

}  // namespace

nlohmann::json parse_client_json(std::string_view text, const std::string& what, const std::string& param) {
  return parse_limited<nlohmann::json>(text, what, param);
}

nlohmann::ordered_json parse_client_ojson(std::string_view text, const std::string& what, const std::string& param) {
  return parse_limited<nlohmann::ordered_json>(text, what, param);
}

}  // namespace lily
