#include "server/http_server.h"

#include <httplib.h>

#include <malloc.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "server/connection.h"
#include "server/http_guard.h"
#include "server/http_util.h"
#include "server/response_json.h"

namespace lily {
namespace {

std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/messages",
                        "/v1/messages/count_tokens", "/v1/responses", "/"})
    if (path == r) return r;
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{id}" : "other";
}

// The listening socket: SO_REUSEADDR only. httplib's default also sets SO_REUSEPORT, which would let
// another process of the same user bind the same port and take part of the connections.
void listen_socket_options(socket_t sock) {
  int yes = 1;
  setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
}

// httplib::Server with its per-connection loop replaced (see server/connection.h).
class GuardedServer final : public httplib::Server {
 public:
  explicit GuardedServer(const ConnLimits& lim) : lim_(lim) {}

  // httplib listens with a backlog of 5: a burst of connections would wait for SYN retries (a second or
  // more) before the cap could even answer them. Listening again on the bound socket widens it.
  void widen_backlog() {
    const socket_t s = svr_sock_;
    if (s != INVALID_SOCKET) ::listen(s, SOMAXCONN);
  }

 private:
  bool process_and_close_socket(socket_t sock) override {
    if (rejecting_connection()) {
      reject_connection(sock, lim_.max_connections);
      ::close(sock);
      return false;
    }
    int yes = 1;  // no Nagle: a response's header and body (or SSE events) go out as written
    setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    bool ret = false;
    {
      ConnStream strm(sock, lim_, svr_sock_);
      ConnScope scope(&strm);
      for (size_t n = 0; n < lim_.max_requests && svr_sock_ != INVALID_SOCKET && strm.wait_next_request(); ++n) {
        strm.begin_head();
        bool closed = false;
        ret = process_request(strm, n + 1 == lim_.max_requests, closed, nullptr);
        // A large request leaves its pages in this thread's malloc arena: give them back.
        if (strm.large()) malloc_trim(0);
        if (strm.closing()) strm.linger();
        if (!ret || closed || strm.closing()) break;
      }
    }
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
    return ret;
  }

  ConnLimits lim_;
};

ConnLimits conn_limits(const ServerConfig& cfg) {
  ConnLimits l;
  l.body_bytes = cfg.max_body + (64u << 10);  // raw bytes: chunk framing on top of the body
  l.max_connections = cfg.max_connections;
  return l;
}

// Answers the request with `e` and closes the connection afterwards (its body, if any, is left unread).
// `path` picks the error's shape (Anthropic's on its routes, OpenAI's elsewhere).
httplib::Server::HandlerResponse refuse(const std::string& path, httplib::Response& res, const ApiError& e) {
  if (ConnStream* conn = current_connection()) conn->close_after_response();
  if (is_anthropic_route(path)) send_anthropic_error_response(res, e);
  else send_error(res, e);
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace

HttpServer::HttpServer(ServerContext& ctx)
    : c_(ctx), svr_(std::make_unique<GuardedServer>(conn_limits(ctx.cfg))) {
  httplib::Server& s = *svr_;
  const size_t max_conns = c_.cfg.max_connections;
  s.new_task_queue = [max_conns] { return new ConnQueue(max_conns); };
  s.set_payload_max_length(c_.cfg.max_body);
  s.set_keep_alive_timeout(5);
  s.set_keep_alive_max_count(conn_limits(c_.cfg).max_requests);
  s.set_read_timeout(30);
  s.set_tcp_nodelay(true);
  s.set_socket_options(listen_socket_options);
  set_body_limit(c_.cfg.max_body);
  policy_ = make_origin_policy(c_.cfg.host, c_.cfg.cors);

  if (!c_.cfg.cors.empty()) {
    s.Options(".*", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
      res.set_header("Access-Control-Max-Age", "86400");
      res.status = 204;
    });
  }
  s.set_pre_routing_handler([this](const httplib::Request& creq, httplib::Response& res) {
    if (ConnStream* conn = current_connection()) conn->begin_body();  // the headers are in
    // httplib hands the request to this handler before reading its body; the handler may still adjust
    // its headers (the object is the connection loop's own, not a const one).
    auto& req = const_cast<httplib::Request&>(creq);
    req.headers.erase(kBodyEncodingHeader);
    const std::string host = req.get_header_value("Host");
    if (std::string why = host_refusal(policy_, host); !why.empty())
      return refuse(req.path, res, ApiError(403, why, "", "host_not_allowed", "permission_error"));
    std::string allow_origin;
    if (std::string why = origin_refusal(policy_, req.get_header_value("Origin"), host, &allow_origin); !why.empty())
      return refuse(req.path, res, ApiError(403, why, "", "origin_not_allowed", "permission_error"));
    if (!allow_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", allow_origin);
      if (allow_origin != "*") res.set_header("Vary", "Origin");
    }
    if (!c_.cfg.cors.empty() && req.method == "OPTIONS") return httplib::Server::HandlerResponse::Unhandled;
    // The chat page itself (GET /) carries no key; its API calls do.
    if (!c_.cfg.api_key.empty() && req.path != "/health" && !(req.path == "/" && req.method == "GET")) {
      const std::string auth = req.get_header_value("Authorization");
      const std::string xkey = req.get_header_value("x-api-key");  // Anthropic clients' header
      if (!bearer_matches(auth, c_.cfg.api_key) && !key_matches(xkey, c_.cfg.api_key)) {
        res.set_header("WWW-Authenticate", "Bearer");
        return refuse(req.path, res,
                      ApiError(401,
                               auth.empty() && xkey.empty()
                                   ? "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                                   : "Incorrect API key provided",
                               "", "invalid_api_key"));
      }
    }
    if (req.method == "POST") {
      // JSON only: a web page can send text/plain or form bodies cross-site without a CORS preflight.
      if (!is_json_content_type(req.get_header_value("Content-Type")))
        return refuse(req.path, res, ApiError(415,
                                    "POST bodies must be sent with 'Content-Type: application/json' (got '" +
                                        req.get_header_value("Content-Type") + "')",
                                    "", "unsupported_media_type"));
      const bool chunked = req.get_header_value("Transfer-Encoding").find("chunked") != std::string::npos;
      if (!chunked && !req.has_header("Content-Length"))
        return refuse(req.path, res, ApiError(411, "POST needs a Content-Length (or chunked Transfer-Encoding)", "",
                                    "length_required"));
      if (!chunked && std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10) > c_.cfg.max_body)
        return refuse(req.path, res, ApiError(413, "Request body too large (limit " + std::to_string(c_.cfg.max_body) +
                                             " bytes, --max-body-mb)",
                                    "", "body_too_large"));
      // Compressed bodies reach parse_body still compressed, which inflates them within the body limit.
      std::string enc = req.get_header_value("Content-Encoding");
      for (char& ch : enc) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (!enc.empty() && enc != "identity") {
        if (enc != "gzip" && enc != "x-gzip" && enc != "deflate" && enc != "br")
          return refuse(req.path, res, ApiError(415, "Content-Encoding '" + enc + "' is not supported (gzip, deflate, br)", "",
                                      "unsupported_encoding"));
        req.headers.erase("Content-Encoding");
        req.set_header(kBodyEncodingHeader, enc);
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0) return httplib::Server::HandlerResponse::Unhandled;
    int st = res.status;
    ConnStream* conn = current_connection();
    std::string msg = st == 404   ? "Unknown route: " + req.method + " " + req.path
                      : st == 413 ? "Request body too large (limit " + std::to_string(c_.cfg.max_body) + " bytes)"
                      : st == 400 ? "Malformed HTTP request"
                                  : "HTTP error " + std::to_string(st);
    if (conn && st == 400 && conn->over_budget()) {
      st = conn->in_body() ? 413 : 431;
      msg = st == 431 ? "Request headers too large (limit " + std::to_string(ConnLimits{}.head_bytes) + " bytes)"
                      : "Request body too large (limit " + std::to_string(c_.cfg.max_body) + " bytes)";
    } else if (conn && st == 400 && conn->timed_out()) {
      st = 408;
      msg = "The request was not received in time (headers within " + std::to_string(ConnLimits{}.head_ms / 1000) +
            " s, the body within " + std::to_string(ConnLimits{}.body_ms / 1000) + " s)";
    }
    if (conn && st >= 400 && st != 404) conn->close_after_response();
    const ApiError e(st, msg, "", st == 404 ? "unknown_route" : "");
    if (is_anthropic_route(req.path)) send_anthropic_error_response(res, e);
    else send_error(res, e);
    res.status = st;
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    ConnStream* conn = current_connection();
    if (conn && conn->closing()) {
      res.headers.erase("Keep-Alive");
      res.set_header("Connection", "close");
    }
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, ApiError(500, what));
  });
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    c_.metrics->count_request(route_label(req.path), res.status);
  });

  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"status", "ok"}, {"model", c_.cfg.model_id}, {"queue_depth", c_.sched->queue_depth()}});
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(c_.metrics->render(), "text/plain; version=0.0.4");
  });
  auto model_obj = [this] {
    return ojson{{"id", c_.cfg.model_id}, {"object", "model"}, {"created", 0}, {"owned_by", "lily"},
                 {"context_length", c_.cfg.ctx}};
  };
  s.Get("/v1/models", [model_obj](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", ojson::array({model_obj()})}});
  });
  s.Get(R"(/v1/models/(.+))", [this, model_obj](const httplib::Request& req, httplib::Response& res) {
    try {
      check_model(c_, req.matches[1].str());
      send_json(res, 200, model_obj());
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  });
  register_chat_routes(s, c_);
  register_completion_routes(s, c_);
  register_messages_routes(s, c_);
  register_responses_routes(s, c_);
  register_page_routes(s, c_);
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
  int port = c_.cfg.port;
  if (port == 0) {
    port = svr_->bind_to_any_port(c_.cfg.host);
    if (port < 0) throw Error("cannot bind " + c_.cfg.host + " to any port");
  } else if (!svr_->bind_to_port(c_.cfg.host, port)) {
    throw Error("cannot bind " + c_.cfg.host + ":" + std::to_string(port) + " (in use, or not a local address?)");
  }
  static_cast<GuardedServer&>(*svr_).widen_backlog();
  return port;
}

void HttpServer::serve() { svr_->listen_after_bind(); }

void HttpServer::stop() { svr_->stop(); }

}  // namespace lily
