// What the HTTP routes share: configuration, tokenizer, chat template, the scheduler and the metrics.
#pragma once
#include <memory>
#include <string>

#include "chat/template.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/tokenizer.h"

namespace lily {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (printed at start)
  int ctx = 8192;                   // context per request, in tokens
  std::string api_key;              // non-empty: "Authorization: Bearer <key>" required
  bool cors = false;                // answer CORS preflights and add Access-Control-Allow-Origin: *
  size_t queue = 16;                // requests waiting at most (beyond the running one)
  size_t cache_mb = 2048;           // session cache budget
  size_t max_body = 8u << 20;       // request body limit in bytes
  std::string model_id;             // served model name
};

struct ServerContext {
  ServerConfig cfg;
  std::shared_ptr<Tokenizer> tok;   // thread-safe const use from HTTP threads
  const ChatTemplate* tmpl = nullptr;
  Scheduler* sched = nullptr;
  Metrics* metrics = nullptr;
  int vocab = 0;
};

}  // namespace lily
