// `lily chat`: an interactive terminal chat. Reads user lines from stdin, keeps the conversation, streams
// each reply (reasoning dimmed on a terminal, prefixed otherwise). Uses the server's Generator and session
// cache, so each turn resumes from the previous one when the tokens match.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "chat/template.h"
#include "cli/model_source.h"
#include "cli/registry.h"
#include "core/error.h"
#include "engine/generate.h"
#include "server/session_cache.h"

namespace lily {
namespace {

int chat(const Args& a) {
  a.check_known({"model", "backend", "ctx", "max-tokens", "temperature", "top-p", "top-k", "seed", "no-think",
                 "system", "cache-mb"});
  const std::string dir = model_dir_or_demo(a);
  auto w = load_model(dir);
  auto tok = Tokenizer::load(dir + "/tokenizer.json");
  const ChatTemplate tmpl = ChatTemplate::load_for_model(dir);
  auto be = make_backend(a.get("backend", "auto"), w);
  const int ctx = static_cast<int>(a.get_int("ctx", std::min(32768, w->cfg.max_pos > 0 ? w->cfg.max_pos : 32768)));
  const int max_tokens = static_cast<int>(a.get_int("max-tokens", 2048));
  SessionCache cache(static_cast<size_t>(a.get_int("cache-mb", 2048)) << 20);
  Generator gen(*be, *tok, &cache, ctx);
  SamplerParams sp;
  sp.temperature = static_cast<float>(a.get_double("temperature", 0.7));
  sp.top_p = static_cast<float>(a.get_double("top-p", 0.95));
  sp.top_k = static_cast<int>(a.get_int("top-k", 20));
  if (a.has("seed")) {
    sp.has_seed = true;
    sp.seed = static_cast<uint64_t>(a.get_int("seed", 0));
  }
  const bool think = !a.has("no-think");
  const int32_t im_start = tok->token_to_id("<|im_start|>");
  const bool tty = isatty(STDOUT_FILENO);
  const char* dim = tty ? "\033[2m" : "";
  const char* reset = tty ? "\033[0m" : "";

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (a.has("system")) messages.push_back({{"role", "system"}, {"content", a.get("system")}});
  std::fprintf(stderr, "lily chat (%s): type a message; /reset starts over, /exit or Ctrl-D quits.\n",
               be->name().c_str());
  std::string line;
  for (;;) {
    if (tty) std::fputs("\n> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (a.has("system")) messages.push_back({{"role", "system"}, {"content", a.get("system")}});
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    nlohmann::ordered_json tctx = {{"messages", messages}, {"add_generation_prompt", true}, {"enable_thinking", think}};
    std::string text;
    try {
      text = tmpl.render(tctx);
    } catch (const Error& e) {
      std::fprintf(stderr, "template error: %s\n", e.what());
      messages.erase(messages.size() - 1);
      continue;
    }
    GenJob job;
    job.prompt = tok->encode(text);
    if (static_cast<int>(job.prompt.size()) >= ctx) {
      std::fprintf(stderr, "the conversation (%zu tokens) no longer fits --ctx %d; /reset to start over\n",
                   job.prompt.size(), ctx);
      messages.erase(messages.size() - 1);
      continue;
    }
    std::string tail = text;
    while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
    job.chat = true;
    job.parser.thinking_open_at_start = tail.size() >= 7 && tail.compare(tail.size() - 7, 7, "<think>") == 0;
    job.max_tokens = max_tokens;
    for (int i = static_cast<int>(job.prompt.size()) - 1; i > 0 && im_start >= 0; --i)
      if (job.prompt[i] == im_start) {
        job.snapshot_at.push_back(i);  // the next turn shares the prompt up to the final assistant header
        break;
      }
    job.sampling = sp;
    bool in_reasoning = false, line_start = true;
    auto emit = [&](GenChunk&& c) {
      if (!c.delta.reasoning.empty()) {
        if (!in_reasoning) std::fputs(tty ? dim : "[thinking] ", stdout);
        in_reasoning = true;
        std::fputs(c.delta.reasoning.c_str(), stdout);
        line_start = c.delta.reasoning.back() == '\n';
      }
      if (!c.delta.content.empty()) {
        if (in_reasoning) {
          std::fputs(reset, stdout);
          if (!line_start) std::fputs("\n", stdout);
          in_reasoning = false;
        }
        std::fputs(c.delta.content.c_str(), stdout);
      }
      std::fflush(stdout);
    };
    GenResult r = gen.run(job, emit, nullptr);
    gen.save_reply_snapshot();
    if (in_reasoning) std::fputs(reset, stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
    std::fprintf(stderr, "%s[%d prompt tokens (%d cached), %d generated, %.1f tok/s, %s]%s\n", dim, r.prompt_tokens,
                 r.cached_tokens, r.completion_tokens, r.completion_tokens / std::max(r.decode_s, 1e-9),
                 r.finish_reason.c_str(), reset);
    nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning.empty()) reply["reasoning_content"] = r.reasoning;
    messages.push_back(reply);
  }
  return 0;
}

}  // namespace

LILY_COMMAND("chat", "interactive terminal chat: [--model DIR] [--no-think] [--system TEXT] [--temperature T]", chat,
             {"no-think"});

}  // namespace lily
