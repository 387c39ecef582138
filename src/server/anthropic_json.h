// The Anthropic Messages API in terms of the chat path: a /v1/messages body becomes the ChatRequest the
// chat template renders (system, text / thinking / tool_use / tool_result blocks, tools with
// input_schema, tool_choice, thinking, stop_sequences, sampling), and a GenResult becomes a Message
// object. Errors use Anthropic's shape {"type": "error", "error": {"type", "message"}}.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/generate.h"
#include "server/request_parse.h"

namespace lily {

struct MessagesRequest {
  ChatRequest chat;           // what build_chat_job takes
  bool thinking = false;      // thinking {"type": "enabled" | "adaptive"}
  int budget_tokens = 0;      // thinking.budget_tokens (0 when not given)
};

// Validates an Anthropic body (for count_tokens `count_only`: no max_tokens needed). Throws ApiError 400
// naming the offending field in Anthropic's terms.
MessagesRequest parse_messages_request(const nlohmann::json& body, bool count_only);

// {"type": "error", "error": {"type", "message"}} with Anthropic's error type names.
nlohmann::ordered_json anthropic_error_json(const ApiError& e);
// end_turn | max_tokens | stop_sequence | tool_use, from the generator's finish and stop string.
std::string anthropic_stop_reason(const GenResult& r);
// usage: input_tokens counts the prompt tokens not resumed from the cache, cache_read_input_tokens those that were.
nlohmann::ordered_json anthropic_usage_json(const GenResult& r);
// The whole Message: thinking block, text block, tool_use blocks (input parsed from the arguments JSON).
nlohmann::ordered_json anthropic_message_json(const std::string& id, const std::string& model, const GenResult& r);

}  // namespace lily
