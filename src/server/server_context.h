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
  std::string cors;                 // "" off; "1" / "*": any origin; else allowed origins, comma-separated
  size_t max_connections = 128;     // connections served at once (more: 503)
  bool allow_special_tokens = false;  // special-token spellings in chat messages are control tokens
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
  size_t max_token_bytes = 0;       // Tokenizer::max_token_bytes() (0: unknown, no early length check)
};

}  // namespace lily
