#include "server/scheduler.h"

#include <cstdio>

namespace lily {

bool Ticket::wait(std::vector<GenChunk>& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> g(m);
  cv.wait_for(g, timeout, [&] { return !chunks.empty() || done; });
  while (!chunks.empty()) {
    out.push_back(std::move(chunks.front()));
    chunks.pop_front();
  }
  return done;
}

Scheduler::Scheduler(Backend& be, const Tokenizer& tok, int ctx, size_t cache_bytes, size_t queue_cap, Metrics& metrics,
                     int prefill_chunk)
    : ctx_(ctx),
      queue_cap_(queue_cap),
      metrics_(metrics),
      cache_(cache_bytes),
      gen_(be, tok, cache_bytes ? &cache_ : nullptr, ctx, prefill_chunk) {
  thread_ = std::thread([this] { loop(); });
}

Scheduler::~Scheduler() { shutdown(); }

std::vector<std::shared_ptr<Ticket>> Scheduler::take_cancelled_locked() {
  std::vector<std::shared_ptr<Ticket>> gone;
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->cancel) {
      gone.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  if (!gone.empty()) metrics_.queue_depth = static_cast<int64_t>(queue_.size());
  return gone;
}

void Scheduler::finish_cancelled(std::vector<std::shared_ptr<Ticket>>& gone) {
  for (auto& t : gone) {
    metrics_.count_cancelled();
    std::lock_guard<std::mutex> g(t->m);
    t->cancelled = t->done = true;
    t->cv.notify_all();
  }
}

std::shared_ptr<Ticket> Scheduler::submit(GenJob job) {
  auto t = std::make_shared<Ticket>();
  t->job = std::move(job);
  std::vector<std::shared_ptr<Ticket>> gone;
  {
    std::lock_guard<std::mutex> g(m_);
    gone = take_cancelled_locked();
    if (stop_ || queue_.size() >= queue_cap_) t = nullptr;
    else {
      queue_.push_back(t);
      metrics_.queue_depth = static_cast<int64_t>(queue_.size());
      cv_.notify_one();
    }
  }
  finish_cancelled(gone);
  return t;
}

size_t Scheduler::queue_depth() {
  std::vector<std::shared_ptr<Ticket>> gone;
  size_t n;
  {
    std::lock_guard<std::mutex> g(m_);
    gone = take_cancelled_locked();
    n = queue_.size();
  }
  finish_cancelled(gone);
  return n;
}

void Scheduler::shutdown() {
  std::deque<std::shared_ptr<Ticket>> dropped;
  {
    std::lock_guard<std::mutex> g(m_);
    if (stop_ && !thread_.joinable()) return;
    stop_ = true;
    dropped.swap(queue_);
    if (running_) running_->cancel = true;
    metrics_.queue_depth = 0;
    cv_.notify_all();
  }
  for (auto& t : dropped) {
    std::lock_guard<std::mutex> g(t->m);
    t->cancelled = t->done = true;
    t->error = "the server is shutting down";
    t->cv.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void Scheduler::loop() {
  for (;;) {
    std::shared_ptr<Ticket> t;
    {
      std::unique_lock<std::mutex> g(m_);
      cv_.wait(g, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      t = queue_.front();
      queue_.pop_front();
      running_ = t;
      metrics_.queue_depth = static_cast<int64_t>(queue_.size());
    }
    metrics_.running = 1;
    run_one(t);
    metrics_.running = 0;
    {
      std::lock_guard<std::mutex> g(m_);
      running_.reset();
    }
  }
}

void Scheduler::run_one(const std::shared_ptr<Ticket>& t) {
  auto finish = [&](auto&& set) {
    std::lock_guard<std::mutex> g(t->m);
    set();
    t->done = true;
    t->cv.notify_all();
  };
  if (t->cancel) {
    metrics_.count_cancelled();
    finish([&] { t->cancelled = true; });
    return;
  }
  {
    std::lock_guard<std::mutex> g(t->m);
    t->started = true;
  }
  try {
    auto emit = [&](GenChunk&& c) {
      std::lock_guard<std::mutex> g(t->m);
      t->chunks.push_back(std::move(c));
      t->cv.notify_all();
    };
    GenResult r = gen_.run(t->job, emit, [&] { return t->cancel.load(); });
    metrics_.count_generation(r.prompt_tokens, r.cached_tokens, r.completion_tokens, r.prefill_s, r.decode_s);
    metrics_.count_mtp(r.mtp_drafted, r.mtp_accepted, r.mtp_switched_off);
    finish([&] { t->result = std::move(r); });
    try {
      gen_.save_reply_snapshot();  // after the answer went out
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lily serve: reply snapshot failed: %s\n", e.what());
    }
  } catch (const Cancelled&) {
    metrics_.count_cancelled();
    finish([&] { t->cancelled = true; });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lily serve: generation failed: %s\n", e.what());
    finish([&] { t->error = e.what(); });
  }
  metrics_.cache_bytes = static_cast<int64_t>(cache_.bytes());
  metrics_.cache_entries = static_cast<int64_t>(cache_.size());
}

}  // namespace lily
