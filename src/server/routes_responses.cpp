// POST /v1/responses (OpenAI Responses API over the chat path), GET / DELETE /v1/responses/{id} for stored
// responses. Streaming sends named events with a sequence_number: response.created, response.in_progress,
// per output item response.output_item.added, (content_part.added, *.delta, *.done, content_part.done for
// reasoning and message items; function_call_arguments.delta / .done for calls), response.output_item.done,
// then response.completed (or response.incomplete when max_output_tokens cut the reply); a failure is an
// `error` event.
#include <httplib.h>

#include "server/block_stream.h"
#include "server/chat_job.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/response_json.h"
#include "server/response_store.h"
#include "server/responses_json.h"
#include "server/sse.h"

namespace lily {
namespace {

struct Turn {  // what a finished reply needs to build and store its Response
  std::string id;
  int64_t created = 0;
  std::string model;
  ResponsesRequest req;
};

int reasoning_tokens(const Tokenizer& tok, const GenResult& r) {
  return r.reasoning.empty() ? 0 : static_cast<int>(tok.encode(r.reasoning).size());
}

void store_turn(ResponseStore& store, const Turn& t, const GenResult& r, const ojson& response) {
  if (!t.req.store) return;
  ojson conv = t.req.history;
  conv.push_back(reply_message(r));
  store.put(t.id, {std::move(conv), response});
}

// The streamed output: items as they are opened, filled and closed.
class ItemStream {
 public:
  explicit ItemStream(std::shared_ptr<Turn> t) : t_(std::move(t)) {}

  bool event(const Writer& w, const std::string& type, ojson body) {
    ojson e = {{"type", type}, {"sequence_number", seq_++}};
    for (auto it = body.begin(); it != body.end(); ++it) e[it.key()] = it.value();
    return w(sse_named(type, e));
  }

  bool blocks(const std::vector<BlockEvent>& evs, const Writer& w) {
    for (const auto& e : evs)
      if (!block(e, w)) return false;
    return true;
  }

  const ojson& output() const { return output_; }

 private:
  bool block(const BlockEvent& e, const Writer& w) {
    const int idx = e.block;
    if (e.type == BlockEvent::Open) {
      ojson item;
      if (e.kind == BlockKind::Reasoning) item = reasoning_item(new_response_id("rs_"), "");
      else if (e.kind == BlockKind::Text) item = message_item(new_response_id("msg_"), "", false);
      else item = function_call_item(new_response_id("fc_"), e.tool_id, e.tool_name, "", false);
      output_.push_back(item);
      text_.emplace_back();
      if (!event(w, "response.output_item.added", {{"output_index", idx}, {"item", item}})) return false;
      if (e.kind == BlockKind::Tool) return true;
      return event(w, "response.content_part.added",
                   {{"item_id", item["id"]}, {"output_index", idx}, {"content_index", 0}, {"part", part(e.kind, "")}});
    }
    ojson& item = output_[static_cast<size_t>(idx)];
    const ojson item_id = item["id"];
    if (e.type == BlockEvent::Delta) {
      text_[static_cast<size_t>(idx)] += e.text;
      if (e.kind == BlockKind::Tool)
        return event(w, "response.function_call_arguments.delta", {{"item_id", item_id}, {"output_index", idx}, {"delta", e.text}});
      ojson body = {{"item_id", item_id}, {"output_index", idx}, {"content_index", 0}, {"delta", e.text}};
      if (e.kind == BlockKind::Text) body["logprobs"] = ojson::array();
      return event(w, e.kind == BlockKind::Text ? "response.output_text.delta" : "response.reasoning_text.delta", body);
    }
    const std::string& text = text_[static_cast<size_t>(idx)];
    bool ok = true;
    if (e.kind == BlockKind::Tool) {
      item = function_call_item(item["id"], e.tool_id, e.tool_name, text, true);
      ok = event(w, "response.function_call_arguments.done",
                 {{"item_id", item_id}, {"output_index", idx}, {"name", e.tool_name}, {"arguments", text}});
    } else {
      ojson body = {{"item_id", item_id}, {"output_index", idx}, {"content_index", 0}, {"text", text}};
      if (e.kind == BlockKind::Text) body["logprobs"] = ojson::array();
      ok = event(w, e.kind == BlockKind::Text ? "response.output_text.done" : "response.reasoning_text.done", body) &&
           event(w, "response.content_part.done",
                 {{"item_id", item_id}, {"output_index", idx}, {"content_index", 0}, {"part", part(e.kind, text)}});
      item = e.kind == BlockKind::Text ? message_item(item["id"], text, true) : reasoning_item(item["id"], text);
    }
    return ok && event(w, "response.output_item.done", {{"output_index", idx}, {"item", item}});
  }

  static ojson part(BlockKind k, const std::string& text) {
    if (k == BlockKind::Reasoning) return {{"type", "reasoning_text"}, {"text", text}};
    return {{"type", "output_text"}, {"text", text}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
  }

  std::shared_ptr<Turn> t_;
  int seq_ = 0;
  ojson output_ = ojson::array();
  std::vector<std::string> text_;  // per output index: text or arguments so far
};

void handle_create(ServerContext& c, ResponseStore& store, const httplib::Request& req, httplib::Response& res) {
  auto prepare = large_prompt_turn(req);  // held until the job is built
  const nlohmann::json body = parse_body(req);
  ojson previous;
  if (const std::string prev = previous_response_id(body); !prev.empty()) {
    auto e = store.get(prev);
    if (!e) throw bad_request("Previous response with id '" + prev + "' not found (it was not stored, or was evicted)",
                              "previous_response_id");
    previous = e->conversation;
  }
  auto turn = std::make_shared<Turn>();
  turn->req = parse_responses_request(body, previous);
  check_model(c, turn->req.chat.opt.model);
  GenJob job = build_chat_job(c, turn->req.chat);
  if (prepare.owns_lock()) prepare.unlock();
  auto t = submit_job(c, std::move(job));
  turn->id = new_response_id("resp_");
  turn->created = unix_now();
  turn->model = c.cfg.model_id;
  const Tokenizer& tok = *c.tok;

  if (!turn->req.chat.opt.stream) {
    Relay relay;
    relay.on_chunk = [](GenChunk&&, const Writer&) { return true; };
    relay.on_done = [turn, &store, &tok](Ticket& tk, const Writer& w) {
      if (!tk.error.empty() || tk.cancelled) {
        w(wire_json(error_json(ApiError(tk.cancelled ? 503 : 500, tk.error.empty() ? "the request was cancelled" : tk.error))));
        return;
      }
      ResponseIds ids{new_response_id("rs_"), new_response_id("msg_"), {}};
      for (size_t i = 0; i < tk.result.tool_calls.size(); ++i) ids.calls.push_back(new_response_id("fc_"));
      ojson resp = response_object(turn->id, turn->created, turn->model, turn->req, &tk.result,
                                   output_items(tk.result, ids), reasoning_tokens(tok, tk.result));
      store_turn(store, *turn, tk.result, resp);
      w(wire_json(resp));
    };
    answer_ticket(res, t, std::move(relay));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  auto items = std::make_shared<ItemStream>(turn);
  auto seq = std::make_shared<BlockSequencer>();
  auto started = std::make_shared<bool>(false);
  auto start = [turn, items, started](const Writer& w) {
    if (*started) return true;
    *started = true;
    ojson r = response_object(turn->id, turn->created, turn->model, turn->req, nullptr, ojson::array(), 0);
    return items->event(w, "response.created", {{"response", r}}) && items->event(w, "response.in_progress", {{"response", r}});
  };
  Relay relay;
  relay.on_chunk = [items, seq, start](GenChunk&& ch, const Writer& w) {
    return start(w) && items->blocks(seq->push(ch.delta), w);
  };
  relay.on_done = [turn, items, seq, start, &store, &tok](Ticket& tk, const Writer& w) {
    start(w);
    if (!tk.error.empty() || tk.cancelled) {
      items->event(w, "error", {{"code", tk.cancelled ? "cancelled" : "server_error"},
                                {"message", tk.error.empty() ? "the request was cancelled" : tk.error},
                                {"param", nullptr}});
      return;
    }
    items->blocks(seq->finish(), w);
    ojson resp = response_object(turn->id, turn->created, turn->model, turn->req, &tk.result, items->output(),
                                 reasoning_tokens(tok, tk.result));
    store_turn(store, *turn, tk.result, resp);
    const bool incomplete = resp["status"] == "incomplete";
    items->event(w, incomplete ? "response.incomplete" : "response.completed", {{"response", resp}});
  };
  relay_ticket(res, "text/event-stream", t, std::move(relay));
}

}  // namespace

void register_responses_routes(httplib::Server& svr, ServerContext& c) {
  auto store = std::make_shared<ResponseStore>();
  svr.Post("/v1/responses", [&c, store](const httplib::Request& req, httplib::Response& res) {
    run_guarded(res, [&] { handle_create(c, *store, req, res); });
  });
  svr.Get(R"(/v1/responses/([A-Za-z0-9_-]+))", [store](const httplib::Request& req, httplib::Response& res) {
    auto e = store->get(req.matches[1].str());
    if (!e) return send_error(res, ApiError(404, "No response with id '" + req.matches[1].str() + "'", "response_id"));
    send_json(res, 200, e->response);
  });
  svr.Delete(R"(/v1/responses/([A-Za-z0-9_-]+))", [store](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1].str();
    if (!store->erase(id)) return send_error(res, ApiError(404, "No response with id '" + id + "'", "response_id"));
    send_json(res, 200, {{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
  });
}

}  // namespace lily
