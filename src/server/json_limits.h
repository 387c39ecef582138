// The one gate every JSON text from a client goes through (request bodies, tool-call arguments sent as
// strings): nesting depth bounded before anything recursive sees the document, numbers the parser cannot
// represent refused. Problems are ApiError 400 naming the limit.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace lily {

// Deepest nesting of arrays / objects accepted in client JSON (a body's top-level object is depth 1).
constexpr int kMaxJsonDepth = 64;

// Deepest nesting in `text`, counted without parsing (brackets outside strings). Stops counting at
// `stop_at` + 1, so hostile input costs one linear pass and nothing else.
int json_nesting_depth(std::string_view text, int stop_at = kMaxJsonDepth);

// Parses client JSON: ApiError 400 (code "invalid_json", naming `what`) on malformed JSON, on nesting
// deeper than kMaxJsonDepth, and on numbers out of double range (1e400). `param` goes into the error.
nlohmann::json parse_client_json(std::string_view text, const std::string& what, const std::string& param = "");
nlohmann::ordered_json parse_client_ojson(std::string_view text, const std::string& what,
                                          const std::string& param = "");

}  // namespace lily
