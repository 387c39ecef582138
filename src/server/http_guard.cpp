#include "server/http_guard.h"

#include <algorithm>
#include <cctype>

namespace lily {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string unbracket(std::string h) {
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

// "name:port", "[v6]:port", "name" -> the name (brackets removed), lower case; "" when malformed.
std::string host_name(const std::string& host_header) {
  std::string h = lower(trim(host_header));
  if (!h.empty() && h.front() == '[') {
    size_t close = h.find(']');
    if (close == std::string::npos) return "";
    std::string rest = h.substr(close + 1);
    if (!rest.empty() && (rest[0] != ':' || rest.size() == 1)) return "";
    return h.substr(1, close - 1);
  }
  size_t colon = h.find(':');
  if (colon != std::string::npos) {
    if (h.find(':', colon + 1) != std::string::npos) return "";  // a bare IPv6 literal is not a Host
    h = h.substr(0, colon);
  }
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." is localhost
  return h;
}

bool all_digits_dots(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)) || c == '.'; });
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  const std::string h = lower(unbracket(trim(host)));
  if (h == "localhost" || h == "::1" || h == "0:0:0:0:0:0:0:1" || h == "::ffff:127.0.0.1") return true;
  return h.rfind("127.", 0) == 0 && all_digits_dots(h);
}

std::string url_host(const std::string& host) {
  const std::string h = unbracket(host);
  return h.find(':') != std::string::npos ? "[" + h + "]" : h;
}

OriginPolicy make_origin_policy(const std::string& bind_host, const std::string& cors) {
  OriginPolicy p;
  p.bound_host = lower(unbracket(trim(bind_host)));
  p.check_host = is_loopback_host(bind_host);
  const std::string c = trim(cors);
  if (c == "1" || c == "*") {
    p.any_origin = true;
    p.check_host = false;
  } else if (!c.empty()) {
    size_t start = 0;
    while (start <= c.size()) {
      size_t comma = c.find(',', start);
      if (comma == std::string::npos) comma = c.size();
      std::string o = lower(trim(c.substr(start, comma - start)));
      while (!o.empty() && o.back() == '/') o.pop_back();
      if (!o.empty()) p.origins.push_back(o);
      start = comma + 1;
    }
  }
  return p;
}

std::string host_refusal(const OriginPolicy& p, const std::string& host_header) {
  if (!p.check_host || host_header.empty()) return "";
  const std::string name = host_name(host_header);
  if (!name.empty() && (is_loopback_host(name) || name == p.bound_host)) return "";
  return "Host '" + host_header +
         "' is not this server's address: it listens on loopback only and answers requests for "
         "localhost, 127.0.0.1 or [::1] (use --host to serve another name)";
}

std::string origin_refusal(const OriginPolicy& p, const std::string& origin, const std::string& host_header,
                           std::string* allow_origin) {
  allow_origin->clear();
  if (origin.empty()) return "";
  if (p.any_origin) {
    allow_origin->assign(1, '*');
    return "";
  }
  std::string o = lower(trim(origin));
  while (!o.empty() && o.back() == '/') o.pop_back();
  if (std::find(p.origins.begin(), p.origins.end(), o) != p.origins.end()) {
    *allow_origin = origin;
    return "";
  }
  if (!host_header.empty() && o == "http://" + lower(trim(host_header))) return "";  // same origin
  return "cross-origin request from '" + origin +
         "' refused: start the server with --cors=ORIGIN to allow a web page to call it";
}

bool is_json_content_type(const std::string& content_type) {
  std::string t = lower(content_type);
  size_t semi = t.find(';');
  if (semi != std::string::npos) t = t.substr(0, semi);
  return trim(t) == "application/json";
}

bool bearer_matches(const std::string& authorization, const std::string& key) {
  const std::string a = trim(authorization);
  if (a.size() < 7 || lower(a.substr(0, 6)) != "bearer" || !std::isspace(static_cast<unsigned char>(a[6])))
    return false;
  return key_matches(trim(a.substr(7)), key);
}

bool key_matches(const std::string& got, const std::string& key) {
  if (got.size() != key.size() || key.empty()) return false;
  unsigned char d = 0;  // every byte compared: no early exit that would time the match
  for (size_t i = 0; i < got.size(); ++i) d |= static_cast<unsigned char>(got[i] ^ key[i]);
  return d == 0;
}

}  // namespace lily
