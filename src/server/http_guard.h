// Who may talk to `lily serve` and how: the Host / Origin rule against DNS rebinding and cross-site
// requests from web pages, JSON-only POST bodies, the bearer-key check, and what a bind address means.
// Pure functions of header values, so they are tested without a socket.
#pragma once
#include <string>
#include <vector>

namespace lily {

// The rule (docs/server.md, "Who can reach the server"):
// - Bound to loopback: Host must be localhost, 127.x.x.x, [::1] or the --host value (any port, or none);
//   a page on another name that resolves to 127.0.0.1 (DNS rebinding) is refused.
// - Bound beyond loopback (--host 0.0.0.0, ::, a LAN address): Host is not checked.
// - Origin (sent by browsers): allowed when absent, when it is the server's own origin ("http://" + Host),
//   when --cors lists it, or with --cors / --cors='*' (any origin; then Host is not checked either).
struct OriginPolicy {
  bool check_host = true;
  std::string bound_host;            // the --host value, lower case, without brackets
  bool any_origin = false;           // --cors or --cors='*'
  std::vector<std::string> origins;  // --cors=ORIGIN[,ORIGIN...], lower case, no trailing '/'
};

// `cors`: "" (off), "1" or "*" (any origin), or a comma-separated origin list.
OriginPolicy make_origin_policy(const std::string& bind_host, const std::string& cors);

// "" when allowed, else why not (for a 403).
std::string host_refusal(const OriginPolicy& p, const std::string& host_header);
// "" when allowed, else why not. `allow_origin` gets the Access-Control-Allow-Origin value to send ("" none).
std::string origin_refusal(const OriginPolicy& p, const std::string& origin, const std::string& host_header,
                           std::string* allow_origin);

bool is_loopback_host(const std::string& host);
// The host as it goes into a URL: IPv6 literals in brackets ("::" -> "[::]").
std::string url_host(const std::string& host);

// Content-Type is application/json (any case, parameters allowed).
bool is_json_content_type(const std::string& content_type);

// "Bearer KEY" (scheme in any case, spaces after it) with KEY equal to `key`; time independent of where
// the keys differ.
bool bearer_matches(const std::string& authorization, const std::string& key);
// `got` equals the non-empty `key`, compared in constant time (the x-api-key header).
bool key_matches(const std::string& got, const std::string& key);

}  // namespace lily
