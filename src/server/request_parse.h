// Validation of OpenAI request bodies into plain structs. Every problem becomes an ApiError (status, type,
// param) — never an uncaught exception. Unknown fields are ignored.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/json_schema.h"
#include "engine/sampler.h"

namespace lily {

// An error answered as {"error": {"message", "type", "param", "code"}} with HTTP `status`.
struct ApiError : std::runtime_error {
  int status;
  std::string type, param, code;
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "");
};

ApiError bad_request(const std::string& message, const std::string& param = "");
// b[k], or nullptr when it is absent or null.
const nlohmann::json* field(const nlohmann::json& b, const char* k);
// b[k] as a string ("" when absent and not required); a 400 naming `where.k` when required and absent, or not
// a string.
std::string str_field(const nlohmann::json& b, const char* k, const std::string& where, bool required);
// A string, or the concatenated "text" of an array of objects whose "type" is one of `types`; other types are a 400
// ("<where>[i]: <type_word> 'T' is not supported<here> (text only)"), as is anything else ("... an array of <items>").
std::string joined_text(const nlohmann::json& c, const std::string& where, const std::vector<std::string>& types,
                        const char* items, const char* type_word, const char* here);

// Options shared by chat and text completions.
struct GenOptions {
  std::string model;                  // as sent ("" when absent)
  int max_tokens = -1;                // -1: not given (chat: up to the context; completions: 16)
  SamplerParams sampling;
  std::vector<std::string> stop;      // stop strings (never emitted)
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool logprobs = false;
  int top_logprobs = 0;
  std::string cache_key;              // prompt_cache_key ("" when absent)
  std::string user;
};

struct ChatRequest {
  GenOptions opt;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // normalised for the chat template
  nlohmann::ordered_json tools;       // array of {"type":"function","function":{...}} or null
  std::string tool_choice = "auto";   // auto | none | required | function
  std::string tool_choice_name;       // when tool_choice == "function"
  bool parallel_tool_calls = true;
  std::string response_format = "text";  // text | json_object | json_schema
  std::shared_ptr<const JsonSchema> json_schema;  // json_schema: the compiled response_format schema
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool enable_thinking = true;
  bool thinking_explicit = false;     // chat_template_kwargs.enable_thinking was given
};

struct CompletionRequest {
  GenOptions opt;
  std::optional<std::string> prompt;  // text prompt, or
  std::vector<int32_t> prompt_ids;    // token ids when the prompt was given as an array of integers
  bool echo = false;
};

// `body` must be the parsed JSON request. Throws ApiError (400) naming the offending field.
ChatRequest parse_chat_request(const nlohmann::json& body);
CompletionRequest parse_completion_request(const nlohmann::json& body);

}  // namespace lily
