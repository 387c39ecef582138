#include "server/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace lily {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSliceMs = 100;  // longest single wait: how fast a stopping server is noticed

thread_local ConnStream* t_current = nullptr;
thread_local bool t_rejecting = false;

void addr_of(const sockaddr_storage& ss, std::string& ip, int& port) {
  char host[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  ip = host;
}

int poll_one(socket_t sock, short events, int timeout_ms, short* revents = nullptr) {
  pollfd p{sock, events, 0};
  int r = ::poll(&p, 1, timeout_ms);
  if (revents) *revents = p.revents;
  return r;
}

}  // namespace

ConnStream::ConnStream(socket_t sock, const ConnLimits& lim, const std::atomic<socket_t>& listener)
    : sock_(sock), lim_(lim), listener_(listener), buf_(16 << 10) {
  begin_head();
}

bool ConnStream::wait_next_request() {
  if (off_ < len_) return true;  // a pipelined request is already here
  const auto end = Clock::now() + std::chrono::milliseconds(lim_.idle_ms);
  for (;;) {
    if (stopping()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) return false;
    int r = poll_one(sock_, POLLIN, static_cast<int>(std::min<long long>(left, kSliceMs)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void ConnStream::begin_head() {
  deadline_ = Clock::now() + std::chrono::milliseconds(lim_.head_ms);
  budget_ = lim_.head_bytes;
  request_bytes_ = 0;
  over_budget_ = timed_out_ = close_after_ = in_body_ = large_ = false;
}

void ConnStream::begin_body() {
  deadline_ = Clock::now() + std::chrono::milliseconds(lim_.body_ms);
  budget_ = lim_.body_bytes;
  in_body_ = true;
}

bool ConnStream::wait_readable() {
  for (;;) {
    if (stopping()) return false;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
    if (left <= 0) {
      timed_out_ = true;
      return false;
    }
    int r = poll_one(sock_, POLLIN, static_cast<int>(std::min<long long>(left, kSliceMs)));
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return false;
  }
}

void ConnStream::linger() {
  ::shutdown(sock_, SHUT_WR);
  const auto end = Clock::now() + std::chrono::seconds(2);
  size_t dropped = 0;
  while (dropped < (64u << 20) && !stopping()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
    if (left <= 0) break;
    int r = poll_one(sock_, POLLIN, static_cast<int>(std::min<long long>(left, kSliceMs)));
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) continue;
    ssize_t n = ::recv(sock_, buf_.data(), buf_.size(), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (n > 0) dropped += static_cast<size_t>(n);
  }
}

bool ConnStream::is_readable() const {
  if (off_ < len_) return true;
  return poll_one(sock_, POLLIN, 0) > 0;
}

bool ConnStream::peer_closed() const {
  short rev = 0;
  int r = poll_one(sock_, POLLIN, 0, &rev);
  if (r <= 0) return r < 0 && errno != EINTR;
  if (rev & (POLLERR | POLLNVAL)) return true;
  char c;
  ssize_t n = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;  // more bytes from the client (a pipelined request): still there
  if (n == 0) return true;
  return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

bool ConnStream::is_writable() const { return !peer_closed(); }

ssize_t ConnStream::read(char* ptr, size_t size) {
  if (size == 0) return 0;
  if (budget_ == 0) {
    over_budget_ = true;
    return -1;
  }
  if (off_ == len_) {
    for (;;) {
      if (!wait_readable()) return -1;
      ssize_t n = ::recv(sock_, buf_.data(), buf_.size(), MSG_DONTWAIT);
      if (n > 0) {
        off_ = 0;
        len_ = static_cast<size_t>(n);
        break;
      }
      if (n == 0) return 0;
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    }
  }
  const size_t n = std::min({size, len_ - off_, budget_});
  std::memcpy(ptr, buf_.data() + off_, n);
  off_ += n;
  budget_ -= n;
  request_bytes_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnStream::write(const char* ptr, size_t size) {
  const auto end = Clock::now() + std::chrono::milliseconds(lim_.write_ms);
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::send(sock_, ptr + done, size - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // The client is not reading: wait, but not past the write deadline or a server stop.
      if (stopping() || Clock::now() >= end) return -1;
      poll_one(sock_, POLLOUT, kSliceMs);
      continue;
    }
    return -1;
  }
  return static_cast<ssize_t>(done);
}

void ConnStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) addr_of(ss, ip, port);
}

void ConnStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&ss), &len) == 0) addr_of(ss, ip, port);
}

ConnStream* current_connection() { return t_current; }

bool client_gone() { return t_current && t_current->peer_closed(); }

ConnScope::ConnScope(ConnStream* s) { t_current = s; }
ConnScope::~ConnScope() { t_current = nullptr; }

// ------------------------------------------------------------------------------------------ ConnQueue

ConnQueue::ConnQueue(size_t max) : max_(std::max<size_t>(max, 1)) {}

ConnQueue::~ConnQueue() { shutdown(); }

void ConnQueue::enqueue(std::function<void()> fn) {
  std::unique_lock<std::mutex> g(m_);
  if (stop_ || busy_ + jobs_.size() >= max_) {
    g.unlock();
    t_rejecting = true;
    fn();
    t_rejecting = false;
    return;
  }
  jobs_.push_back(std::move(fn));
  if (idle_ < jobs_.size()) {
    ++idle_;  // counted idle until it takes its first job
    threads_.emplace_back([this] { worker(); });
  }
  cv_.notify_one();
}

void ConnQueue::worker() {
  std::unique_lock<std::mutex> g(m_);
  for (;;) {
    cv_.wait(g, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) {
      --idle_;
      return;  // stopping, nothing left
    }
    auto fn = std::move(jobs_.front());
    jobs_.pop_front();
    --idle_;
    ++busy_;
    g.unlock();
    fn();
    g.lock();
    --busy_;
    ++idle_;
  }
}

void ConnQueue::shutdown() {
  std::vector<std::thread> ts;
  {
    std::lock_guard<std::mutex> g(m_);
    stop_ = true;
    ts.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : ts)
    if (t.joinable()) t.join();
}

bool rejecting_connection() { return t_rejecting; }

void reject_connection(socket_t sock, size_t max_connections) {
  const std::string body = "{\"error\":{\"message\":\"The server has " + std::to_string(max_connections) +
                           " connections open (--max-connections); retry later\",\"type\":\"server_error\","
                           "\"param\":null,\"code\":\"too_many_connections\"}}";
  const std::string msg = "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n" + body;
  (void)::send(sock, msg.data(), msg.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(sock, SHUT_WR);
  // Drain what the client already sent (without waiting), so closing does not turn into a reset.
  char buf[4096];
  for (int i = 0; i < 16 && ::recv(sock, buf, sizeof buf, MSG_DONTWAIT) > 0; ++i) {
  }
}

}  // namespace lily
