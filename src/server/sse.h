// Server-sent events framing for streamed completions: `data: {json}\n\n` ... `data: [DONE]\n\n`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace lily {

// Serialises JSON for the wire; invalid UTF-8 (a token split inside a character) becomes U+FFFD.
std::string wire_json(const nlohmann::json& j);
std::string wire_json(const nlohmann::ordered_json& j);

std::string sse_event(const nlohmann::ordered_json& j);  // "data: " + json + "\n\n"
std::string sse_done();                                  // "data: [DONE]\n\n"
std::string sse_comment(const std::string& text);        // ": text\n\n" (keep-alive; ignored by clients)

}  // namespace lily
