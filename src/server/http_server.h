// The HTTP front end of `lily serve`: OpenAI-compatible routes over cpp-httplib, with every request
// checked before its body is read (Host / Origin, bearer key, JSON content type, body size and encoding),
// connections held to deadlines and a cap (server/connection.h), request metrics, and JSON errors for
// every failure (unknown route, oversize body, handler exception).
#pragma once
#include <memory>
#include <string>

#include "server/request_parse.h"
#include "server/http_guard.h"
#include "server/server_context.h"

namespace httplib {
class Server;
struct Response;
}

namespace lily {

class HttpServer {
 public:
  explicit HttpServer(ServerContext& ctx);
  ~HttpServer();

  // Binds cfg.host:cfg.port (any free port when 0); returns the bound port. Throws lily::Error on failure.
  int bind();
  // Serves until stop(); returns after the listener closed.
  void serve();
  void stop();

 private:
  ServerContext& c_;
  std::unique_ptr<httplib::Server> svr_;
  OriginPolicy policy_;
};

// Route registration (routes_*.cpp).
void register_chat_routes(httplib::Server& svr, ServerContext& c);
void register_completion_routes(httplib::Server& svr, ServerContext& c);
void register_messages_routes(httplib::Server& svr, ServerContext& c);   // Anthropic /v1/messages
void register_responses_routes(httplib::Server& svr, ServerContext& c);  // OpenAI /v1/responses
void register_page_routes(httplib::Server& svr, ServerContext& c);       // the chat page at /

// Anthropic routes answer errors in Anthropic's shape (routes_messages.cpp).
bool is_anthropic_route(const std::string& path);
void send_anthropic_error_response(httplib::Response& res, const ApiError& e);

}  // namespace lily
