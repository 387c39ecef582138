// Helpers shared by the HTTP routes: JSON bodies and errors, model checks, queueing, and the loop that
// relays a Ticket's output to the client and cancels the job when the client goes away.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "server/request_parse.h"
#include "server/server_context.h"

namespace lily {

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body);
void send_error(httplib::Response& res, const ApiError& e);

// Parses the body as JSON; ApiError 400 naming the position on malformed input.
nlohmann::json parse_body(const httplib::Request& req);
// ApiError 404 unless `model` is empty or the served model.
void check_model(const ServerContext& c, const std::string& model);
// ApiError 400 when the prompt leaves no room to generate.
void check_context(const ServerContext& c, size_t prompt_tokens, const std::string& param);
// Queues the job; ApiError 429 when the queue is full.
std::shared_ptr<Ticket> submit_job(ServerContext& c, GenJob job);

// Writes one piece of a response; returns false when the client is gone.
using Writer = std::function<bool(const std::string&)>;

struct Relay {
  // Called with each chunk as it arrives; writes its framing. Returns false to abort.
  std::function<bool(GenChunk&&, const Writer&)> on_chunk;
  // Called once when the job is done (check ticket->error / ticket->cancelled).
  std::function<void(Ticket&, const Writer&)> on_done;
};

// Runs a route's handler, turning exceptions into OpenAI error responses: ApiError as it is, lily::Error
// (tokenizer / template input problems) as 400, anything else as 500.
void run_guarded(httplib::Response& res, const std::function<void()>& handler);

// Streams the ticket's output through a chunked response. Cancels the job when the client disconnects
// (checked every 50 ms, also while waiting in the queue or during prefill).
void relay_ticket(httplib::Response& res, const char* content_type, std::shared_ptr<Ticket> t, Relay relay);

}  // namespace lily
