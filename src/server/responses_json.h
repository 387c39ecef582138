// The OpenAI Responses API in terms of the chat path: a /v1/responses body (input as a string or items:
// messages, function_call, function_call_output, reasoning; instructions; flat function tools;
// text.format; reasoning.effort; previous_response_id) becomes the ChatRequest the chat template renders,
// and a reply becomes output items (reasoning, message, function_call) of a Response object.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "engine/generate.h"
#include "server/request_parse.h"

namespace lily {

struct ResponsesRequest {
  ChatRequest chat;                      // the whole conversation, ready for build_chat_job
  nlohmann::ordered_json history;        // chat messages of the conversation without the instructions
  std::string previous_response_id;      // "" when absent
  bool store = true;
  nlohmann::ordered_json echo;           // request fields the Response object repeats
};

// `previous`: the stored conversation (chat messages) of previous_response_id, or null when the body
// names none. Throws ApiError 400 naming the offending field.
ResponsesRequest parse_responses_request(const nlohmann::json& body, const nlohmann::ordered_json& previous);
// The previous_response_id a body names ("" when none; ApiError 400 when it is not a string).
std::string previous_response_id(const nlohmann::json& body);

struct ResponseIds {                     // ids of the output items, made once per reply
  std::string reasoning, message;
  std::vector<std::string> calls;        // fc_... per tool call
};

nlohmann::ordered_json reasoning_item(const std::string& id, const std::string& text);
nlohmann::ordered_json message_item(const std::string& id, const std::string& text, bool done);
nlohmann::ordered_json function_call_item(const std::string& id, const std::string& call_id, const std::string& name,
                                          const std::string& arguments, bool done);
// Output items of a finished reply: reasoning (if any), message (if any text or no calls), function calls.
nlohmann::ordered_json output_items(const GenResult& r, ResponseIds& ids);
// The chat message the reply adds to the conversation (what the next turn's template renders).
nlohmann::ordered_json reply_message(const GenResult& r);
// usage: input/output tokens, cached_tokens, reasoning_tokens.
nlohmann::ordered_json responses_usage_json(const GenResult& r, int reasoning_tokens);
// A Response object: status in_progress (output empty) until `r` is given.
nlohmann::ordered_json response_object(const std::string& id, int64_t created, const std::string& model,
                                       const ResponsesRequest& req, const GenResult* r, nlohmann::ordered_json output,
                                       int reasoning_tokens);

}  // namespace lily
