// `lily chat`: an interactive terminal chat. Reads user lines from stdin, keeps the conversation, streams
// each reply (reasoning dimmed on a terminal, prefixed otherwise, or hidden with --hide-reasoning). Uses the
// server's Generator and session cache, so each turn resumes from the previous one when the tokens match.
// Commands: /reset, /think on|off, /help, /exit (or Ctrl-D).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "app/make_backend.h"
#include "cli/model_assets.h"
#include "cli/mtp_args.h"
#include "chat/template.h"
#include "cli/model_source.h"
#include "cli/registry.h"
#include "core/error.h"
#include "engine/generate.h"
#include "engine/session_cache.h"

namespace lily {
namespace {

const char* kHelp =
    "commands: /reset (forget the conversation), /think on|off (reasoning for the next turns), /help, /exit\n";

// Prints a reply as it streams: reasoning dimmed (TTY) or prefixed with "[thinking] ", or not at all.
class ReplyPrinter {
 public:
  ReplyPrinter(bool tty, bool hide_reasoning) : tty_(tty), hide_(hide_reasoning) {}

  void chunk(const ParsedDelta& d) {
    if (!d.reasoning.empty() && !hide_) {
      if (!in_reasoning_) std::fputs(tty_ ? "\033[2m" : "[thinking] ", stdout);
      in_reasoning_ = true;
      std::fputs(d.reasoning.c_str(), stdout);
      line_start_ = d.reasoning.back() == '\n';
    }
    if (!d.content.empty()) {
      end_reasoning();
      std::fputs(d.content.c_str(), stdout);
    }
    std::fflush(stdout);
  }

  void finish() {
    if (in_reasoning_ && tty_) std::fputs("\033[0m", stdout);
    std::fputs("\n", stdout);
    std::fflush(stdout);
  }

 private:
  void end_reasoning() {
    if (!in_reasoning_) return;
    if (tty_) std::fputs("\033[0m", stdout);
    if (!line_start_) std::fputs("\n", stdout);
    in_reasoning_ = false;
  }

  bool tty_, hide_;
  bool in_reasoning_ = false, line_start_ = true;
};

int chat(const Args& a) {
  a.check_known({"model", "backend", "ctx", "max-tokens", "temperature", "top-p", "top-k", "seed", "no-think",
                 "hide-reasoning", "system", "cache-mb", "mtp", "mtp-from"});
  const std::string dir = model_dir_or_demo(a);
  auto w = load_model(dir);
  const MtpChoice mtp = load_mtp_for(a, *w);
  auto tok = load_model_tokenizer(dir);
  const ChatTemplate tmpl = load_model_template(dir);
  auto be = make_backend(a.get("backend", "auto"), w);
  const int ctx = static_cast<int>(a.get_int("ctx", std::min(32768, w->cfg.max_pos > 0 ? w->cfg.max_pos : 32768)));
  const int max_tokens = static_cast<int>(a.get_int("max-tokens", 2048));
  if (ctx < 16) throw Error("--ctx must be at least 16");
  if (max_tokens < 1) throw Error("--max-tokens must be at least 1");
  SessionCache cache(static_cast<size_t>(a.get_int("cache-mb", 2048)) << 20);
  Generator gen(*be, *tok, &cache, ctx);
  gen.set_mtp(mtp_for_backend(mtp, *be, "chat"));
  SamplerParams sp;
  sp.temperature = static_cast<float>(a.get_double("temperature", 0.7));
  sp.top_p = static_cast<float>(a.get_double("top-p", 0.95));
  sp.top_k = static_cast<int>(a.get_int("top-k", 20));
  if (a.has("seed")) {
    sp.has_seed = true;
    sp.seed = static_cast<uint64_t>(a.get_int("seed", 0));
  }
  bool think = !a.has("no-think");
  const bool hide_reasoning = a.has("hide-reasoning");
  const int32_t im_start = tok->token_to_id("<|im_start|>");
  const bool tty = isatty(STDOUT_FILENO);
  const char* dim = tty ? "\033[2m" : "";
  const char* reset = tty ? "\033[0m" : "";

  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  auto start_over = [&] {
    messages = nlohmann::ordered_json::array();
    if (a.has("system")) messages.push_back({{"role", "system"}, {"content", a.get("system")}});
  };
  start_over();
  std::fprintf(stderr, "lily chat (%s, thinking %s): type a message; /help lists commands, /exit or Ctrl-D quits.\n",
               be->name().c_str(), think ? "on" : "off");
  std::string line;
  for (;;) {
    if (tty) std::fputs("\n> ", stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      start_over();
      std::fprintf(stderr, "%s[conversation reset]%s\n", dim, reset);
      continue;
    }
    if (line == "/think on" || line == "/think off") {
      think = line == "/think on";
      std::fprintf(stderr, "%s[thinking %s for the next turns]%s\n", dim, think ? "on" : "off", reset);
      continue;
    }
    if (line == "/help" || line == "/think") {
      std::fprintf(stderr, "%sthinking is %s; %s", dim, think ? "on" : "off", kHelp);
      if (tty) std::fputs(reset, stderr);
      continue;
    }
    if (line.size() > 1 && line[0] == '/' && line[1] != '/' && line.find(' ') == std::string::npos) {
      std::fprintf(stderr, "unknown command %s; %s", line.c_str(), kHelp);
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
    job.parser.parse_tool_calls = false;  // no tools in a terminal chat: "<tool_call>" is plain text
    job.parser.thinking_open_at_start = tail.size() >= 7 && tail.compare(tail.size() - 7, 7, "<think>") == 0;
    job.max_tokens = max_tokens;
    for (int i = static_cast<int>(job.prompt.size()) - 1; i > 0 && im_start >= 0; --i)
      if (job.prompt[i] == im_start) {
        job.snapshot_at.push_back(i);  // the next turn shares the prompt up to the final assistant header
        break;
      }
    job.sampling = sp;
    ReplyPrinter out(tty, hide_reasoning);
    GenResult r = gen.run(job, [&](GenChunk&& c) { out.chunk(c.delta); }, nullptr);
    gen.save_reply_snapshot();
    out.finish();
    std::string mtp_note;
    if (r.mtp_drafted > 0)
      mtp_note = ", mtp " + std::to_string(r.mtp_accepted) + "/" + std::to_string(r.mtp_drafted) + " drafts accepted" +
                 (r.mtp_switched_off ? " (then off: no gain)" : "");
    std::fprintf(stderr, "%s[%d prompt tokens (%d cached), %d generated, %.1f tok/s%s, %s]%s\n", dim, r.prompt_tokens,
                 r.cached_tokens, r.completion_tokens, r.completion_tokens / std::max(r.decode_s, 1e-9),
                 mtp_note.c_str(), r.finish_reason.c_str(), reset);
    nlohmann::ordered_json reply = {{"role", "assistant"}, {"content", r.content}};
    if (!r.reasoning.empty()) reply["reasoning_content"] = r.reasoning;
    messages.push_back(reply);
  }
  return 0;
}

}  // namespace

LILY_COMMAND("chat",
             "interactive terminal chat: [--model DIR] [--no-think] [--hide-reasoning] [--system TEXT] "
             "[--temperature T] [--seed N] [--max-tokens N] [--ctx N] [--mtp K|off] [--mtp-from DIR]",
             chat, {"no-think", "hide-reasoning"});

}  // namespace lily
