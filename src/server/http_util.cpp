#include "server/http_util.h"

#include "core/error.h"

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

nlohmann::json parse_body(const httplib::Request& req) {
  try {
    return nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::parse_error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "", "invalid_json");
  }
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
