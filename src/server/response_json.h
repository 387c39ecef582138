// OpenAI response objects: chat.completion, chat.completion.chunk, text_completion, usage, errors.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generate.h"
#include "server/request_parse.h"
#include "tokenizer/tokenizer.h"

namespace lily {

using ojson = nlohmann::ordered_json;

struct ResponseMeta {
  std::string id;        // chatcmpl-... / cmpl-...
  int64_t created = 0;   // unix seconds
  std::string model;     // served model id
};

std::string new_response_id(const char* prefix);  // prefix + 24 random alphanumerics
int64_t unix_now();

ojson error_json(const ApiError& e);
ojson usage_json(const GenResult& r);

// Chat: per-token logprobs entries {token, logprob, bytes, top_logprobs}.
ojson chat_logprobs_json(const std::vector<TokenInfo>& toks, const Tokenizer& tok);
ojson chat_completion_json(const ResponseMeta& m, const GenResult& r, const std::vector<TokenInfo>* logprobs,
                           const Tokenizer& tok);
// One streamed chunk; `delta` is the already-built delta object; finish_reason null unless given.
ojson chat_chunk_json(const ResponseMeta& m, ojson delta, const std::string& finish_reason, ojson logprobs,
                      bool include_usage);
ojson chat_delta_json(const ParsedDelta& d);       // {reasoning_content?, content?, tool_calls?}
ojson usage_chunk_json(const ResponseMeta& m, const char* object, const GenResult& r);

// Text completions.
ojson completion_logprobs_json(const std::vector<TokenInfo>& toks, const Tokenizer& tok, size_t text_offset);
ojson completion_json(const ResponseMeta& m, const std::string& text, const GenResult& r, ojson logprobs);
ojson completion_chunk_json(const ResponseMeta& m, const std::string& text, const std::string& finish_reason,
                            ojson logprobs, bool include_usage);

}  // namespace lily
