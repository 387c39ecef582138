// Helpers shared by the HTTP routes: JSON bodies and errors, model checks, queueing, and the loop that
// relays a Ticket's output to the client and cancels the job when the client goes away.
#pragma once
#include <httplib.h>

#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

#include "server/request_parse.h"
#include "server/server_context.h"

namespace lily {

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body);
void send_error(httplib::Response& res, const ApiError& e);

// Every route parses its body here (and nowhere else): a body sent with Content-Encoding gzip / deflate /
// br is decoded up to the body limit (413 beyond it, so a small compressed body cannot become a huge
// one), then parsed through parse_client_json (400 on malformed JSON, nesting deeper than kMaxJsonDepth
// or numbers out of range).
nlohmann::json parse_body(const httplib::Request& req);
// The decoded-body limit parse_body applies (the server sets it from --max-body-mb).
void set_body_limit(size_t bytes);
size_t body_limit();
// The request header under which the server hands a body's Content-Encoding to parse_body (httplib itself
// would inflate it without a limit).
inline constexpr const char* kBodyEncodingHeader = "X-Lily-Body-Encoding";
// Decodes `data` sent with Content-Encoding `encoding` (gzip, x-gzip, deflate or br), refusing output
// beyond `limit` bytes (ApiError 413) and corrupt data (400).
std::string decode_body(const std::string& data, const std::string& encoding, size_t limit);
// ApiError 404 unless `model` is empty or the served model.
void check_model(const ServerContext& c, const std::string& model);
// ApiError 400 when the prompt leaves no room to generate.
void check_context(const ServerContext& c, size_t prompt_tokens, const std::string& param);
// Before tokenizing: ApiError 400 (context_length_exceeded) when a text of `bytes` bytes cannot fit the
// context whatever its tokens (each token spells at most max_token_bytes bytes; a factor of 2 covers
// Unicode normalisation), so a huge prompt is refused without building its token vector.
void check_prompt_bytes(const ServerContext& c, size_t bytes, const std::string& param);
// Preparing a request (parse, template, tokenize) costs many times its body's size while it runs (the
// template works on code points, the tokenizer on pieces): requests whose body is over 1 MiB (or
// compressed) are prepared one at a time. Hold the returned lock from parse_body to the built job.
std::unique_lock<std::mutex> large_prompt_turn(const httplib::Request& req);
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

// Non-streamed responses: waits for the whole reply inside the handler (cancelling the job when the
// client disconnects), so the status is known before anything is sent: 200, or 500 / 503 with the error
// body when the job failed or was cancelled after it started.
void answer_ticket(httplib::Response& res, std::shared_ptr<Ticket> t, Relay relay);

// Streams the ticket's output through a chunked response. Cancels the job when the client disconnects
// (checked every 50 ms, also while waiting in the queue or during prefill).
void relay_ticket(httplib::Response& res, const char* content_type, std::shared_ptr<Ticket> t, Relay relay);

}  // namespace lily
