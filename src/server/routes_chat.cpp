// POST /v1/chat/completions: messages -> chat template -> tokens -> scheduler; streamed (SSE) or whole.
#include <httplib.h>

#include "core/error.h"
#include "server/http_server.h"
#include "server/chat_job.h"
#include "server/forced_tool.h"
#include "server/http_util.h"
#include "server/literal_text.h"
#include "server/response_json.h"
#include "server/sse.h"

namespace lily {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

GenJob build_chat_job(ServerContext& c, const ChatRequest& r) {
  ojson ctx = r.template_kwargs;
  // Special-token spellings inside the request are text (server/literal_text.h).
  std::vector<std::string> literals;
  const std::vector<std::string> specials = c.cfg.allow_special_tokens ? std::vector<std::string>() : c.tok->special_tokens();
  ctx["messages"] = r.messages;
  if (!specials.empty()) mask_special_text(ctx["messages"], specials, literals);
  ojson tools = r.tools;
  if (r.tool_choice == "none") tools = nullptr;
  if (r.tool_choice == "function") {
    ojson only = ojson::array();
    for (const auto& t : r.tools)
      if (t["function"]["name"] == r.tool_choice_name) only.push_back(t);
    tools = only;
  }
  if (!tools.is_null()) {
    ctx["tools"] = tools;
    if (!specials.empty()) mask_special_text(ctx["tools"], specials, literals);
  }
  ctx["add_generation_prompt"] = true;
  // json_object: thinking is off unless the request turns it on (then the JSON starts after </think>).
  const bool json_object = r.response_format == "json_object" || r.response_format == "json_schema";
  ctx["enable_thinking"] = json_object && !r.thinking_explicit ? false : r.enable_thinking;
  if (!ctx.contains("preserve_thinking")) ctx["preserve_thinking"] = false;
  std::string text;
  try {
    text = c.tmpl->render(ctx);
  } catch (const Error& e) {
    throw bad_request(std::string("the chat template rejected the messages: ") + e.what(), "messages");
  }
  std::vector<size_t> literal_at;
  text = unmask_special_text(text, literals, literal_at);
  std::string trimmed = text;
  while (!trimmed.empty() && (trimmed.back() == '\n' || trimmed.back() == ' ')) trimmed.pop_back();
  const bool thinking_open = ends_with(trimmed, "<think>");

  GenJob job;
  // A forced call (tool_choice required / named): the reply opens "<tool_call>\n" and the call is decoded
  // in the JSON form under the tools' parameter schemas.
  constrain_forced_tool(job, r, tools, thinking_open);
  check_prompt_bytes(c, text.size() + job.forced_text.size(), "messages");
  job.prompt = literal_at.empty() ? c.tok->encode(text + job.forced_text)
                                  : c.tok->encode(text + job.forced_text, literal_at);
  check_context(c, job.prompt.size(), "messages");
  job.max_tokens = r.opt.max_tokens > 0 ? r.opt.max_tokens : c.cfg.ctx - static_cast<int>(job.prompt.size());
  job.sampling = r.opt.sampling;
  job.stop = r.opt.stop;
  job.chat = true;
  job.parser.thinking_open_at_start = thinking_open;
  // A constrained reply is one JSON object: "<tool_call>" inside one of its strings is text.
  job.parser.parse_tool_calls = !tools.is_null() && !json_object;
  if (!job.json_after_forced) {
    job.json_object = json_object;
    job.json_schema = r.json_schema;
  }
  if (!tools.is_null()) job.parser.tools = nlohmann::json::parse(tools.dump());
  job.logprobs = r.opt.logprobs;
  job.single_tool_call = !r.parallel_tool_calls;
  job.cache_key = r.opt.cache_key;
  // Snapshot where the final assistant header starts: the next turn's prompt matches up to there.
  const int32_t im_start = c.tok->token_to_id("<|im_start|>");
  for (int i = static_cast<int>(job.prompt.size()) - 1; i > 0 && im_start >= 0; --i)
    if (job.prompt[i] == im_start) {
      job.snapshot_at.push_back(i);
      break;
    }
  return job;
}

namespace {

ojson error_event(const Ticket& t) {
  return error_json(ApiError(t.cancelled ? 503 : 500, t.error.empty() ? "the request was cancelled" : t.error));
}

void handle_chat(ServerContext& c, const httplib::Request& req, httplib::Response& res) {
  ChatRequest r;
  GenJob job;
  {
    auto turn = large_prompt_turn(req);
    r = parse_chat_request(parse_body(req));
    check_model(c, r.opt.model);
    job = build_chat_job(c, r);
  }
  auto t = submit_job(c, std::move(job));
  ResponseMeta meta{new_response_id("chatcmpl-"), unix_now(), c.cfg.model_id};
  const Tokenizer& tok = *c.tok;

  if (!r.opt.stream) {
    auto logprobs = std::make_shared<std::vector<TokenInfo>>();
    const bool want_lp = r.opt.logprobs;
    Relay relay;
    relay.on_chunk = [logprobs, want_lp](GenChunk&& ch, const Writer&) {
      if (want_lp) logprobs->insert(logprobs->end(), ch.tokens.begin(), ch.tokens.end());
      return true;
    };
    relay.on_done = [meta, logprobs, want_lp, &tok](Ticket& tk, const Writer& w) {
      if (!tk.error.empty() || tk.cancelled) {
        w(wire_json(error_event(tk)));
        return;
      }
      w(wire_json(chat_completion_json(meta, tk.result, want_lp ? logprobs.get() : nullptr, tok)));
    };
    answer_ticket(res, t, std::move(relay));
    return;
  }

  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  const bool usage = r.opt.include_usage, want_lp = r.opt.logprobs;
  auto first = std::make_shared<bool>(true);
  auto opening = [meta, usage, first](const Writer& w) {
    if (!*first) return true;
    *first = false;
    return w(sse_event(chat_chunk_json(meta, {{"role", "assistant"}, {"content", ""}}, "", nullptr, usage)));
  };
  Relay relay;
  relay.on_chunk = [meta, usage, want_lp, opening, &tok](GenChunk&& ch, const Writer& w) {
    if (!opening(w)) return false;
    ojson delta = chat_delta_json(ch.delta);
    ojson lp = want_lp ? chat_logprobs_json(ch.tokens, tok) : ojson(nullptr);
    if (delta.empty() && ch.tokens.empty()) return true;
    return w(sse_event(chat_chunk_json(meta, std::move(delta), "", std::move(lp), usage)));
  };
  relay.on_done = [meta, usage, opening](Ticket& tk, const Writer& w) {
    if (!tk.error.empty() || tk.cancelled) {
      w(sse_event(error_event(tk)));
      w(sse_done());
      return;
    }
    opening(w);
    w(sse_event(chat_chunk_json(meta, ojson::object(), tk.result.finish_reason, nullptr, usage)));
    if (usage) w(sse_event(usage_chunk_json(meta, "chat.completion.chunk", tk.result)));
    w(sse_done());
  };
  relay_ticket(res, "text/event-stream", t, std::move(relay));
}

}  // namespace

void register_chat_routes(httplib::Server& svr, ServerContext& c) {
  svr.Post("/v1/chat/completions", [&c](const httplib::Request& req, httplib::Response& res) {
    run_guarded(res, [&] { handle_chat(c, req, res); });
  });
}

}  // namespace lily
