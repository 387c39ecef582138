// The inference thread and its bounded FIFO queue. HTTP threads submit validated jobs and consume their
// output through a Ticket; the single inference thread owns the model, the generator and the session cache.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/generate.h"
#include "server/metrics.h"
#include "engine/session_cache.h"

namespace lily {

// One request's channel, shared by its HTTP thread (consumer) and the inference thread (producer).
struct Ticket {
  GenJob job;
  std::atomic<bool> cancel{false};  // set by the consumer (client gone) or by shutdown

  // Output: chunks in order, then done. `error` is set (and result meaningless) when the job failed;
  // `cancelled` when it was cancelled.
  std::mutex m;
  std::condition_variable cv;
  std::deque<GenChunk> chunks;
  bool started = false, done = false, cancelled = false;
  std::string error;
  GenResult result;

  // Waits up to `timeout` for output; moves available chunks into `out`. Returns true once done (after the
  // last chunk was handed over).
  bool wait(std::vector<GenChunk>& out, std::chrono::milliseconds timeout);
};

class Scheduler {
 public:
  Scheduler(Backend& be, const Tokenizer& tok, int ctx, size_t cache_bytes, size_t queue_cap, Metrics& metrics,
            int prefill_chunk = 0);
  ~Scheduler();

  // Queues a job; null when the queue is full or the scheduler is shutting down. Queued jobs whose client
  // left (cancel set) are dropped first, so they never hold a slot.
  std::shared_ptr<Ticket> submit(GenJob job);
  // Cancels everything queued or running and stops the inference thread.
  void shutdown();

  size_t queue_depth();
  int ctx() const { return ctx_; }
  const std::vector<int32_t>& stop_ids() const { return gen_.stop_ids(); }
  // Speculative decoding (Generator::set_mtp); call before the first request.
  void set_mtp(int k) { gen_.set_mtp(k); }

 private:
  void loop();
  // Removes cancelled tickets from queue_ (m_ held) and returns them to be finished without m_.
  std::vector<std::shared_ptr<Ticket>> take_cancelled_locked();
  void finish_cancelled(std::vector<std::shared_ptr<Ticket>>& gone);
  void run_one(const std::shared_ptr<Ticket>& t);

  int ctx_;
  size_t queue_cap_;
  Metrics& metrics_;
  SessionCache cache_;       // inference thread only
  Generator gen_;            // inference thread only
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Ticket>> queue_;
  std::shared_ptr<Ticket> running_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lily
