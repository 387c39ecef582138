// POST /v1/messages and /v1/messages/count_tokens: the Anthropic Messages API over the chat path
// (anthropic_json converts the body; build_chat_job renders and tokenizes it). Streaming follows
// Anthropic's event sequence: message_start, ping, then per block content_block_start /
// content_block_delta (thinking_delta, text_delta, input_json_delta) / content_block_stop, then
// message_delta (stop_reason, usage) and message_stop; a failure mid-stream is an `error` event.
#include <httplib.h>

#include "core/error.h"
#include "server/anthropic_json.h"
#include "server/block_stream.h"
#include "server/chat_job.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/response_json.h"
#include "server/sse.h"

namespace lily {
namespace {

void send_anthropic_error(httplib::Response& res, const ApiError& e) {
  if (e.status == 429) res.set_header("Retry-After", "1");
  send_json(res, e.status, anthropic_error_json(e));
}

// run_guarded with Anthropic's error shape.
void guarded(httplib::Response& res, const std::function<void()>& handler) {
  try {
    handler();
  } catch (const ApiError& e) {
    send_anthropic_error(res, e);
  } catch (const Error& e) {
    send_anthropic_error(res, bad_request(e.what()));
  } catch (const std::exception& e) {
    send_anthropic_error(res, ApiError(500, e.what()));
  }
}

ApiError ticket_error(const Ticket& t) {
  return ApiError(t.cancelled ? 503 : 500, t.error.empty() ? "the request was cancelled" : t.error);
}

ojson block_start_json(const BlockEvent& e) {
  ojson b;
  if (e.kind == BlockKind::Reasoning) b = {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  else if (e.kind == BlockKind::Text) b = {{"type", "text"}, {"text", ""}};
  else b = {{"type", "tool_use"}, {"id", e.tool_id}, {"name", e.tool_name}, {"input", ojson::object()}};
  return {{"type", "content_block_start"}, {"index", e.block}, {"content_block", b}};
}

ojson block_delta_json(const BlockEvent& e) {
  ojson d;
  if (e.kind == BlockKind::Reasoning) d = {{"type", "thinking_delta"}, {"thinking", e.text}};
  else if (e.kind == BlockKind::Text) d = {{"type", "text_delta"}, {"text", e.text}};
  else d = {{"type", "input_json_delta"}, {"partial_json", e.text}};
  return {{"type", "content_block_delta"}, {"index", e.block}, {"delta", d}};
}

bool write_events(const std::vector<BlockEvent>& evs, const Writer& w) {
  for (const auto& e : evs) {
    bool ok = true;
    if (e.type == BlockEvent::Open) {
      ok = w(sse_named("content_block_start", block_start_json(e)));
    } else if (e.type == BlockEvent::Delta) {
      ok = w(sse_named("content_block_delta", block_delta_json(e)));
    } else {
      if (e.kind == BlockKind::Reasoning)  // the block's signature: none (nothing here verifies thinking)
        ok = w(sse_named("content_block_delta", {{"type", "content_block_delta"},
                                                 {"index", e.block},
                                                 {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
      ok = ok && w(sse_named("content_block_stop", {{"type", "content_block_stop"}, {"index", e.block}}));
    }
    if (!ok) return false;
  }
  return true;
}

void handle_messages(ServerContext& c, const httplib::Request& req, httplib::Response& res) {
  MessagesRequest r;
  GenJob job;
  {
    auto turn = large_prompt_turn(req);
    r = parse_messages_request(parse_body(req), false);
    check_model(c, r.chat.opt.model);
    job = build_chat_job(c, r.chat);
  }
  // thinking.budget_tokens: close the reasoning block when it runs out (not when a forced tool call closed it).
  if (r.thinking && r.budget_tokens > 0 && !job.json_after_forced) job.thinking_budget = r.budget_tokens;
  const int prompt_tokens = static_cast<int>(job.prompt.size());
  auto t = submit_job(c, std::move(job));
  const std::string id = new_response_id("msg_");
  const std::string model = c.cfg.model_id;

  if (!r.chat.opt.stream) {
    Relay relay;
    relay.on_chunk = [](GenChunk&&, const Writer&) { return true; };
    relay.on_done = [id, model](Ticket& tk, const Writer& w) {
      if (!tk.error.empty() || tk.cancelled) {
        w(wire_json(anthropic_error_json(ticket_error(tk))));
        return;
      }
      w(wire_json(anthropic_message_json(id, model, tk.result)));
    };
    answer_ticket(res, t, std::move(relay));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto seq = std::make_shared<BlockSequencer>();
  auto started = std::make_shared<bool>(false);
  auto start = [id, model, prompt_tokens, started](const Writer& w) {
    if (*started) return true;
    *started = true;
    ojson msg = {{"id", id},
                 {"type", "message"},
                 {"role", "assistant"},
                 {"model", model},
                 {"content", ojson::array()},
                 {"stop_reason", nullptr},
                 {"stop_sequence", nullptr},
                 {"usage", {{"input_tokens", prompt_tokens}, {"output_tokens", 0}}}};
    return w(sse_named("message_start", {{"type", "message_start"}, {"message", msg}})) &&
           w(sse_named("ping", {{"type", "ping"}}));
  };
  Relay relay;
  relay.on_chunk = [seq, start](GenChunk&& ch, const Writer& w) {
    return start(w) && write_events(seq->push(ch.delta), w);
  };
  relay.on_done = [seq, start](Ticket& tk, const Writer& w) {
    start(w);
    if (!tk.error.empty() || tk.cancelled) {
      w(sse_named("error", anthropic_error_json(ticket_error(tk))));
      return;
    }
    write_events(seq->finish(), w);
    const GenResult& g = tk.result;
    ojson delta = {{"stop_reason", anthropic_stop_reason(g)},
                   {"stop_sequence", g.stop_string.empty() ? ojson(nullptr) : ojson(g.stop_string)}};
    w(sse_named("message_delta", {{"type", "message_delta"}, {"delta", delta}, {"usage", anthropic_usage_json(g)}}));
    w(sse_named("message_stop", {{"type", "message_stop"}}));
  };
  relay_ticket(res, "text/event-stream", t, std::move(relay));
}

void handle_count_tokens(ServerContext& c, const httplib::Request& req, httplib::Response& res) {
  auto turn = large_prompt_turn(req);
  MessagesRequest r = parse_messages_request(parse_body(req), true);
  check_model(c, r.chat.opt.model);
  r.chat.opt.max_tokens = 1;
  const GenJob job = build_chat_job(c, r.chat);
  send_json(res, 200, {{"input_tokens", job.prompt.size()}});
}

}  // namespace

bool is_anthropic_route(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

void send_anthropic_error_response(httplib::Response& res, const ApiError& e) { send_anthropic_error(res, e); }

void register_messages_routes(httplib::Server& svr, ServerContext& c) {
  svr.Post("/v1/messages", [&c](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_messages(c, req, res); });
  });
  svr.Post("/v1/messages/count_tokens", [&c](const httplib::Request& req, httplib::Response& res) {
    guarded(res, [&] { handle_count_tokens(c, req, res); });
  });
}

}  // namespace lily
