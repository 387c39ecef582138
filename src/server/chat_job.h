// The generation job of a validated chat request: the chat template rendered over the messages and tools,
// tokenized, with the forced tool-call prefix, sampling, stops and the snapshot point for the next turn.
// Shared by /v1/chat/completions, /v1/messages and /v1/responses (they all reduce to a ChatRequest).
#pragma once
#include "engine/generate.h"
#include "server/request_parse.h"
#include "server/server_context.h"

namespace lily {

// Throws ApiError 400 when the template rejects the messages or the prompt leaves no room to generate.
GenJob build_chat_job(ServerContext& c, const ChatRequest& r);

}  // namespace lily
