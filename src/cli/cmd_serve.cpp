// `lily serve`: the OpenAI-compatible HTTP server (src/server/). One inference thread owns the model;
// SIGINT / SIGTERM cancel running work, close the listener and exit cleanly.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "app/make_backend.h"
#include "cli/model_assets.h"
#include "chat/template.h"
#include "cli/model_source.h"
#include "cli/mtp_args.h"
#include "cli/registry.h"
#include "core/error.h"
#include "engine/backend.h"
#include "io/text_file.h"
#include "server/http_guard.h"
#include "server/http_server.h"
#include "tokenizer/tokenizer.h"

namespace lily {
namespace {

long positive(const Args& a, const char* k, long def, long lo, long hi) {
  long v = a.get_int(k, def);
  if (v < lo || v > hi)
    throw Error(std::string("--") + k + " must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

// The key from --api-key-file FILE (its first line), LILY_API_KEY, or --api-key KEY (visible to every
// local user in the process list, so the other two are preferred); "" when none is set.
std::string api_key(const Args& a) {
  if (a.has("api-key") + a.has("api-key-file") > 1) throw Error("give either --api-key or --api-key-file, not both");
  std::string key, from;
  if (a.has("api-key-file")) {
    from = "--api-key-file " + a.get("api-key-file");
    key = read_text_file(a.get("api-key-file"), 64 << 10);
    key = key.substr(0, key.find('\n'));
  } else if (a.has("api-key")) {
    from = "--api-key";
    key = a.get("api-key");
  } else if (const char* env = std::getenv("LILY_API_KEY")) {
    from = "LILY_API_KEY";
    key = env;
  } else {
    return "";
  }
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.back()))) key.pop_back();
  while (!key.empty() && std::isspace(static_cast<unsigned char>(key.front()))) key.erase(key.begin());
  if (key.empty()) throw Error(from + " gives an empty key");
  return key;
}

int serve(const Args& a) {
  a.check_known({"model", "host", "port", "ctx", "api-key", "api-key-file", "cors", "queue", "cache-mb", "backend",
                 "max-body-mb", "model-id", "prefill-chunk", "max-connections", "allow-special-tokens", "mtp",
                 "mtp-from"});
  // Signals go to the watcher thread only: block them before any other thread exists (the backend's
  // worker threads inherit the mask). A signal during loading waits for the watcher.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::string dir = model_dir_or_demo(a);
  ServerConfig cfg;
  cfg.host = a.get("host", "127.0.0.1");
  cfg.port = static_cast<int>(positive(a, "port", 8080, 0, 65535));
  cfg.api_key = api_key(a);
  cfg.cors = a.get("cors");
  cfg.allow_special_tokens = a.has("allow-special-tokens");
  cfg.max_connections = static_cast<size_t>(positive(a, "max-connections", 128, 1, 4096));
  cfg.queue = static_cast<size_t>(positive(a, "queue", 16, 1, 4096));
  cfg.cache_mb = static_cast<size_t>(positive(a, "cache-mb", 2048, 0, 1 << 22));
  cfg.max_body = static_cast<size_t>(positive(a, "max-body-mb", 8, 1, 1024)) << 20;
  std::string id = std::filesystem::path(dir).lexically_normal().filename().string();
  if (id.empty()) id = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  cfg.model_id = a.get("model-id", id.empty() ? "lily" : id);

  auto w = load_model(dir);
  const MtpChoice mtp = load_mtp_for(a, *w);
  const int max_pos = w->cfg.max_pos > 0 ? w->cfg.max_pos : 32768;
  cfg.ctx = static_cast<int>(positive(a, "ctx", std::min(32768, max_pos), 16, 1 << 24));
  auto tok = load_model_tokenizer(dir);
  const ChatTemplate tmpl = load_model_template(dir);
  auto be = make_backend(a.get("backend", "auto"), w);

  Metrics metrics;
  Scheduler sched(*be, *tok, cfg.ctx, cfg.cache_mb << 20, cfg.queue, metrics,
                  static_cast<int>(positive(a, "prefill-chunk", 0, 0, 1 << 20)));  // 0: the backend's default
  const int mtp_k = mtp_for_backend(mtp, *be, "serve");
  sched.set_mtp(mtp_k);
  ServerContext c{cfg, tok, &tmpl, &sched, &metrics, w->cfg.vocab, tok->max_token_bytes()};
  HttpServer http(c);
  const int port = http.bind();
  if (!is_loopback_host(cfg.host))
    std::fprintf(stderr,
                 "lily serve: warning: --host %s listens beyond this machine: other hosts can reach it%s; the "
                 "Host header is not checked\n",
                 cfg.host.c_str(), cfg.api_key.empty() ? " and no API key is set (--api-key-file)" : "");
  std::printf("lily serve: listening on http://%s:%d (model '%s', backend %s, ctx %d, mtp %s)\n",
              url_host(cfg.host).c_str(), port, cfg.model_id.c_str(), be->name().c_str(), cfg.ctx,
              mtp_k ? std::to_string(mtp_k).c_str() : "off");
  std::fflush(stdout);

  std::atomic<bool> served{false};
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (!served) std::fprintf(stderr, "lily serve: signal %d, shutting down\n", sig);
    sched.shutdown();
    http.stop();
  });
  http.serve();
  served = true;
  pthread_kill(watcher.native_handle(), SIGTERM);  // wakes the watcher if serve() ended on its own
  watcher.join();
  sched.shutdown();
  std::fprintf(stderr, "lily serve: stopped\n");
  return 0;
}

}  // namespace

LILY_COMMAND("serve",
             "OpenAI-compatible HTTP server: [--model DIR] [--host 127.0.0.1] [--port 8080] [--ctx N] "
             "[--api-key-file FILE | LILY_API_KEY=KEY | --api-key KEY] [--cors | --cors=ORIGIN,...] [--queue N] "
             "[--cache-mb N] [--backend auto|cpu|cuda] [--max-body-mb 8] [--max-connections 128] "
             "[--allow-special-tokens] [--mtp K|off] [--mtp-from DIR]",
             serve, {"cors", "allow-special-tokens"});

}  // namespace lily
