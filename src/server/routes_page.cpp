// GET /: the chat page (src/server/page/chat.html, compiled into the binary by cmake/embed_file.cmake).
// It talks to /v1/chat/completions from the browser; nothing is loaded from elsewhere.
#include <httplib.h>

#include "server/http_server.h"

namespace lily {

extern const unsigned char kChatPage[];
extern const unsigned long kChatPage_size;

void register_page_routes(httplib::Server& svr, ServerContext&) {
  svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:");
    res.set_content(reinterpret_cast<const char*>(kChatPage), static_cast<size_t>(kChatPage_size),
                    "text/html; charset=utf-8");
  });
}

}  // namespace lily
