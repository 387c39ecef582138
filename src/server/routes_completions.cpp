// POST /v1/completions: raw text (or token ids) in, text out; streamed (SSE) or whole.
#include <httplib.h>

#include "core/error.h"
#include "server/http_server.h"
#include "server/http_util.h"
#include "server/response_json.h"
#include "server/sse.h"

namespace lily {
namespace {

void handle_completion(ServerContext& c, const httplib::Request& req, httplib::Response& res) {
  auto turn = large_prompt_turn(req);
  CompletionRequest r = parse_completion_request(parse_body(req));
  check_model(c, r.opt.model);
  GenJob job;
  std::string prompt_text;
  if (r.prompt) {
    prompt_text = *r.prompt;
    check_prompt_bytes(c, prompt_text.size(), "prompt");
    job.prompt = c.tok->encode(prompt_text);
  } else {
    for (int32_t id : r.prompt_ids)
      if (id >= c.vocab) throw bad_request("token id " + std::to_string(id) + " is outside the vocabulary", "prompt");
    job.prompt = r.prompt_ids;
    prompt_text = c.tok->decode(job.prompt);
  }
  check_context(c, job.prompt.size(), "prompt");
  job.max_tokens = r.opt.max_tokens;
  job.sampling = r.opt.sampling;
  job.stop = r.opt.stop;
  job.logprobs = r.opt.logprobs;
  job.cache_key = r.opt.cache_key;
  if (turn.owns_lock()) turn.unlock();
  auto t = submit_job(c, std::move(job));
  ResponseMeta meta{new_response_id("cmpl-"), unix_now(), c.cfg.model_id};
  const Tokenizer& tok = *c.tok;
  const bool want_lp = r.opt.logprobs;
  const std::string echo = r.echo ? prompt_text : "";

  auto fail = [](const Ticket& tk) {
    return error_json(ApiError(tk.cancelled ? 503 : 500, tk.error.empty() ? "the request was cancelled" : tk.error));
  };
  if (!r.opt.stream) {
    auto acc = std::make_shared<std::vector<TokenInfo>>();
    Relay relay;
    relay.on_chunk = [acc, want_lp](GenChunk&& ch, const Writer&) {
      if (want_lp) acc->insert(acc->end(), ch.tokens.begin(), ch.tokens.end());
      return true;
    };
    relay.on_done = [meta, acc, want_lp, echo, fail, &tok](Ticket& tk, const Writer& w) {
      if (!tk.error.empty() || tk.cancelled) {
        w(wire_json(fail(tk)));
        return;
      }
      ojson lp = want_lp ? completion_logprobs_json(*acc, tok, echo.size()) : ojson(nullptr);
      w(wire_json(completion_json(meta, echo + tk.result.content, tk.result, std::move(lp))));
    };
    answer_ticket(res, t, std::move(relay));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  const bool usage = r.opt.include_usage;
  auto offset = std::make_shared<size_t>(0);
  auto pending_echo = std::make_shared<std::string>(echo);
  Relay relay;
  relay.on_chunk = [meta, usage, want_lp, offset, pending_echo, &tok](GenChunk&& ch, const Writer& w) {
    std::string text = *pending_echo + ch.delta.content;
    ojson lp = want_lp ? completion_logprobs_json(ch.tokens, tok, *offset + pending_echo->size()) : ojson(nullptr);
    pending_echo->clear();
    *offset += text.size();
    if (text.empty() && ch.tokens.empty()) return true;
    return w(sse_event(completion_chunk_json(meta, text, "", std::move(lp), usage)));
  };
  relay.on_done = [meta, usage, pending_echo, fail](Ticket& tk, const Writer& w) {
    if (!tk.error.empty() || tk.cancelled) {
      w(sse_event(fail(tk)));
      w(sse_done());
      return;
    }
    w(sse_event(completion_chunk_json(meta, *pending_echo, tk.result.finish_reason, nullptr, usage)));
    if (usage) w(sse_event(usage_chunk_json(meta, "text_completion", tk.result)));
    w(sse_done());
  };
  relay_ticket(res, "text/event-stream", t, std::move(relay));
}

}  // namespace

void register_completion_routes(httplib::Server& svr, ServerContext& c) {
  svr.Post("/v1/completions", [&c](const httplib::Request& req, httplib::Response& res) {
    run_guarded(res, [&] { handle_completion(c, req, res); });
  });
}

}  // namespace lily
