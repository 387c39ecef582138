// Connections of `lily serve`, below cpp-httplib's request parsing: one stream per accepted socket that
// holds every request to a deadline and a byte budget (slowloris, endless headers or chunked bodies),
// keeps read-ahead bytes for the next request (pipelining), notices a client that left, and stops
// waiting as soon as the server stops. ConnQueue caps the number of connections served at once.
#pragma once
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <mutex>
#include <thread>
#include <vector>

namespace lily {

struct ConnLimits {
  int idle_ms = 5000;            // keep-alive: wait for the next request at most this long
  int head_ms = 10000;           // request line + headers, from the request's first byte
  int body_ms = 60000;           // the whole body, from the end of the headers
  int write_ms = 30000;          // one blocked write
  size_t head_bytes = 64 << 10;  // request line + headers
  size_t body_bytes = 8 << 20;   // raw body bytes (chunk framing included; decoded size: see parse_body)
  size_t max_connections = 128;  // served at once; more are answered 503 and closed
  size_t max_requests = 1000;    // per connection (keep-alive)
};

class ConnStream final : public httplib::Stream {
 public:
  // `listener` is the server's listening socket: INVALID_SOCKET once the server stops.
  ConnStream(socket_t sock, const ConnLimits& lim, const std::atomic<socket_t>& listener);

  // Keep-alive wait: true when the next request's first bytes are here (already buffered or arriving
  // within idle_ms); false on close, idle timeout or server stop.
  bool wait_next_request();
  void begin_head();  // a request starts: head deadline and budget
  void begin_body();  // its headers are parsed: body deadline and budget
  bool over_budget() const { return over_budget_; }   // the last read failed on the byte budget
  bool timed_out() const { return timed_out_; }       // ... or on the deadline
  bool in_body() const { return in_body_; }           // begin_body() was called for this request
  size_t request_bytes() const { return request_bytes_; }
  // The request grew large in memory beyond its raw bytes (a decoded body): worth a malloc_trim after it.
  void note_large() { large_ = true; }
  bool large() const { return large_ || request_bytes_ > (1u << 20); }
  bool peer_closed() const;  // the client closed its side (nothing buffered from it can follow)
  // Close the connection after this response (its request's body may not have been read).
  void close_after_response() { close_after_ = true; }
  bool closing() const { return close_after_; }
  // Before closing a connection whose request was not read to the end: sends FIN, then reads and drops
  // what the client still sends (at most 64 MiB, 2 s), so it sees the response rather than a reset.
  void linger();

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

 private:
  bool stopping() const { return listener_.load() == INVALID_SOCKET; }
  // Waits until the socket is readable (true) or the phase's deadline passes / the server stops (false).
  bool wait_readable();

  socket_t sock_;
  ConnLimits lim_;
  const std::atomic<socket_t>& listener_;
  std::vector<char> buf_;  // read-ahead [off_, len_)
  size_t off_ = 0, len_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  size_t budget_ = 0;         // bytes the current phase may still read
  size_t request_bytes_ = 0;  // bytes read for the current request
  bool over_budget_ = false, timed_out_ = false, close_after_ = false, in_body_ = false, large_ = false;
};

// The connection the calling thread is serving (null outside one).
ConnStream* current_connection();
// True when the calling thread serves a connection whose client has gone.
bool client_gone();

// Sets the calling thread's current connection for its lifetime.
class ConnScope {
 public:
  explicit ConnScope(ConnStream* s);
  ~ConnScope();
};

// httplib's task queue for accepted sockets: threads started as needed, at most `max` connections served
// at once. An accepted socket beyond that is handed to the accepting thread itself with
// rejecting_connection() true, so it is answered 503 and closed at once instead of waiting.
class ConnQueue final : public httplib::TaskQueue {
 public:
  explicit ConnQueue(size_t max);
  ~ConnQueue() override;
  void enqueue(std::function<void()> fn) override;
  void shutdown() override;

 private:
  void worker();
  size_t max_;
  std::mutex m_;
  std::condition_variable cv_;
  std::list<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0, busy_ = 0;
  bool stop_ = false;
};

bool rejecting_connection();
// Answers 503 (connection limit) on `sock` without blocking; the caller closes it.
void reject_connection(socket_t sock, size_t max_connections);

}  // namespace lily
