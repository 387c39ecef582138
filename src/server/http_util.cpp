#include "server/http_util.h"

#include <atomic>

#include "core/error.h"
#include "server/connection.h"
#include "server/json_limits.h"

#include "server/response_json.h"
#include "server/sse.h"

namespace lily {

void send_json(httplib::Response& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(wire_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status, error_json(e));
}

namespace {
std::atomic<size_t> g_body_limit{8u << 20};
}  // namespace

void set_body_limit(size_t bytes) { g_body_limit = bytes; }
size_t body_limit() { return g_body_limit; }

std::string decode_body(const std::string& data, const std::string& encoding, size_t limit) {
  std::unique_ptr<httplib::detail::decompressor> d;
  if (encoding == "gzip" || encoding == "x-gzip" || encoding == "deflate")
    d = std::make_unique<httplib::detail::gzip_decompressor>();
  else if (encoding == "br")
    d = std::make_unique<httplib::detail::brotli_decompressor>();
  else
    throw ApiError(415, "Content-Encoding '" + encoding + "' is not supported (gzip, deflate, br)", "",
                   "unsupported_encoding");
  if (!d->is_valid()) throw ApiError(500, "cannot start the " + encoding + " decoder");
  std::string out;
  bool too_big = false;
  if (ConnStream* conn = current_connection()) conn->note_large();  // freed pages go back after the request
  bool ok = d->decompress(data.data(), data.size(), [&](const char* p, size_t n) {
    if (out.size() + n > limit) {
      too_big = true;
      return false;
    }
    out.append(p, n);
    return true;
  });
  if (too_big)
    throw ApiError(413,
                   "Request body too large once decoded (" + encoding + "): the limit is " + std::to_string(limit) +
                       " bytes (--max-body-mb), counted after decompression",
                   "", "body_too_large");
  if (!ok) throw ApiError(400, "the request body is not valid " + encoding + " data", "", "invalid_encoding");
  return out;
}

nlohmann::json parse_body(const httplib::Request& req) {
  const std::string enc = req.get_header_value(kBodyEncodingHeader);
  if (enc.empty()) return parse_client_json(req.body, "the request body");
  return parse_client_json(decode_body(req.body, enc, body_limit()), "the request body");
}

void check_model(const ServerContext& c, const std::string& model) {
  if (model.empty() || model == c.cfg.model_id) return;
  throw ApiError(404, "The model '" + model + "' does not exist; this server serves '" + c.cfg.model_id + "'",
                 "model", "model_not_found");
}

void check_context(const ServerContext& c, size_t prompt_tokens, const std::string& param) {
  if (prompt_tokens == 0) throw bad_request("the prompt is empty", param);
  if (prompt_tokens >= static_cast<size_t>(c.cfg.ctx))
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(c.cfg.ctx) +
                       " tokens (--ctx). However, your prompt has " + std::to_string(prompt_tokens) +
                       " tokens, which leaves no room for the completion.",
                   param, "context_length_exceeded");
}

void check_prompt_bytes(const ServerContext& c, size_t bytes, const std::string& param) {
  if (c.max_token_bytes == 0) return;
  const size_t at_least = bytes / (2 * c.max_token_bytes);
  if (at_least >= static_cast<size_t>(c.cfg.ctx))
    throw ApiError(400,
                   "This model's maximum context length is " + std::to_string(c.cfg.ctx) +
                       " tokens (--ctx). However, your prompt of " + std::to_string(bytes) + " bytes has at least " +
                       std::to_string(at_least) + " tokens, which leaves no room for the completion.",
                   param, "context_length_exceeded");
}

std::unique_lock<std::mutex> large_prompt_turn(const httplib::Request& req) {
  static std::mutex m;
  if (req.body.size() <= (1u << 20) && !req.has_header(kBodyEncodingHeader)) return {};
  return std::unique_lock<std::mutex>(m);
}

std::shared_ptr<Ticket> submit_job(ServerContext& c, GenJob job) {
  auto t = c.sched->submit(std::move(job));
  if (!t) {
    c.metrics->count_rejected();
    throw ApiError(429, "The server is busy (" + std::to_string(c.cfg.queue) +
                            " requests already queued); retry later",
                   "", "queue_full");
  }
  return t;
}

void answer_ticket(httplib::Response& res, std::shared_ptr<Ticket> t, Relay relay) {
  std::string body;
  Writer collect = [&body](const std::string& s) {
    body += s;
    return true;
  };
  for (;;) {
    std::vector<GenChunk> chunks;
    const bool done = t->wait(chunks, std::chrono::milliseconds(50));
    for (auto& c : chunks) relay.on_chunk(std::move(c), collect);
    if (done) break;
    if (client_gone()) {  // nobody to answer: free the queue slot / stop the job now
      t->cancel = true;
      if (ConnStream* conn = current_connection()) conn->close_after_response();
      send_error(res, ApiError(503, "the client disconnected"));
      return;
    }
  }
  relay.on_done(*t, collect);
  res.status = t->cancelled ? 503 : !t->error.empty() ? 500 : 200;
  res.set_content(body, "application/json");
}

void relay_ticket(httplib::Response& res, const char* content_type, std::shared_ptr<Ticket> t, Relay relay) {
  res.status = 200;
  auto provider = [t, relay](size_t, httplib::DataSink& sink) {
    Writer write = [&sink](const std::string& s) { return s.empty() || sink.write(s.data(), s.size()); };
    std::vector<GenChunk> chunks;
    bool done = t->wait(chunks, std::chrono::milliseconds(50));
    if (!sink.is_writable()) {
      t->cancel = true;
      return false;
    }
    for (auto& c : chunks)
      if (!relay.on_chunk(std::move(c), write)) {
        t->cancel = true;
        return false;
      }
    if (done) {
      relay.on_done(*t, write);
      sink.done();
    }
    return true;
  };
  res.set_chunked_content_provider(content_type, provider, [t](bool success) {
    if (!success) t->cancel = true;
  });
}

void run_guarded(httplib::Response& res, const std::function<void()>& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, e.what()));
  }
}

}  // namespace lily
