#include "server/http_server.h"

#include <httplib.h>

#include <cstdio>

#include "core/error.h"
#include "server/http_util.h"
#include "server/response_json.h"

namespace lily {
namespace {

// Key comparison whose time does not depend on where the strings differ.
bool equal_const_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size() || b.empty()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

std::string route_label(const std::string& path) {
  for (const char* r : {"/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/metrics", "/v1/messages",
                        "/v1/messages/count_tokens", "/v1/responses", "/"})
    if (path == r) return r;
  if (path.rfind("/v1/responses/", 0) == 0) return "/v1/responses/{id}";
  return path.rfind("/v1/models/", 0) == 0 ? "/v1/models/{id}" : "other";
}

}  // namespace

HttpServer::HttpServer(ServerContext& ctx) : c_(ctx), svr_(std::make_unique<httplib::Server>()) {
  httplib::Server& s = *svr_;
  const size_t threads = c_.cfg.queue + 16;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(c_.cfg.max_body);
  s.set_keep_alive_timeout(5);
  s.set_read_timeout(30);

  if (c_.cfg.cors) {
    s.set_default_headers({{"Access-Control-Allow-Origin", "*"}});
    s.Options(".*", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version");
      res.set_header("Access-Control-Max-Age", "86400");
      res.status = 204;
    });
  }
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (c_.cfg.api_key.empty() || req.path == "/health" || (req.path == "/" && req.method == "GET") || (c_.cfg.cors && req.method == "OPTIONS"))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.size() > prefix.size() && auth.compare(0, prefix.size(), prefix) == 0 &&
        equal_const_time(auth.substr(prefix.size()), c_.cfg.api_key))
      return httplib::Server::HandlerResponse::Unhandled;
    const std::string xkey = req.get_header_value("x-api-key");  // Anthropic clients' header
    if (equal_const_time(xkey, c_.cfg.api_key)) return httplib::Server::HandlerResponse::Unhandled;
    res.set_header("WWW-Authenticate", "Bearer");
    const ApiError e(401,
                     auth.empty() && xkey.empty()
                         ? "Missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
                         : "Incorrect API key provided",
                     "", "invalid_api_key");
    if (is_anthropic_route(req.path)) send_anthropic_error_response(res, e);
    else send_error(res, e);
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.content_length_ > 0) return httplib::Server::HandlerResponse::Unhandled;
    const int st = res.status;
    std::string msg = st == 404   ? "Unknown route: " + req.method + " " + req.path
                      : st == 413 ? "Request body too large (limit " + std::to_string(c_.cfg.max_body) + " bytes)"
                      : st == 400 ? "Malformed HTTP request"
                                  : "HTTP error " + std::to_string(st);
    const ApiError e(st, msg, "", st == 404 ? "unknown_route" : "");
    if (is_anthropic_route(req.path)) send_anthropic_error_response(res, e);
    else send_error(res, e);
    res.status = st;
    return httplib::Server::HandlerResponse::Handled;
  }));
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
  return port;
}

void HttpServer::serve() { svr_->listen_after_bind(); }

void HttpServer::stop() { svr_->stop(); }

}  // namespace lily
