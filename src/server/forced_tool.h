// A forced tool call (tool_choice "required" or a named function; Anthropic any / tool) constrained to
// the tool's parameter schema: the reply is forced to open "<tool_call>\n" and the call body is decoded
// as the Qwen JSON form {"name": NAME, "arguments": {...}} under a JSON Schema built from the tools
// (name const, arguments = the tool's `parameters`; anyOf over the tools for "required"). The output
// parser reads that form as a tool call once "</tool_call>" is fed after it.
#pragma once
#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "server/request_parse.h"

namespace lily {

// The schema of a forced call over `tools` (OpenAI tools array, already narrowed to the named function).
// Throws ApiError 400 naming the tool and keyword when a parameters schema uses an unsupported keyword.
std::shared_ptr<const JsonSchema> forced_call_schema(const nlohmann::ordered_json& tools);

// Sets up `job` for a forced, schema-constrained call: forced_text (thinking closed first when open),
// json_object with the schema, json_after_forced, json_suffix. No-op unless tool_choice forces a tool.
void constrain_forced_tool(GenJob& job, const ChatRequest& r, const nlohmann::ordered_json& tools, bool thinking_open);

}  // namespace lily
