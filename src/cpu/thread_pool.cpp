#include "cpu/thread_pool.h"

#include <cstdlib>

namespace lily {

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* e = std::getenv("LILY_THREADS")) {
      int n = std::atoi(e);
      if (n > 0) return n;
    }
    unsigned hc = std::thread::hardware_concurrency();
    return hc ? static_cast<int>(hc) : 1;
  }());
  return pool;
}

void ThreadPool::run_tasks(int thread) {
  for (int t = next_.fetch_add(1); t < n_tasks_; t = next_.fetch_add(1)) (*fn_)(t, thread);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    run_tasks(index);
    std::lock_guard<std::mutex> lk(mu_);
    if (--pending_ == 0) cv_done_.notify_one();
  }
}

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int, int)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    fn_ = &fn;
    n_tasks_ = n_tasks;
    next_.store(0);
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  cv_start_.notify_all();
  run_tasks(0);
  std::unique_lock<std::mutex> lk(mu_);
  cv_done_.wait(lk, [&] { return pending_ == 0; });
}

}  // namespace lily
