#include "cpu/thread_pool.h"

#include <cstdlib>

namespace lily {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
constexpr int kSpinIters = 20000;  // ~50-100 us of spinning before a worker sleeps on the condition variable
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < n_threads; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    generation_.fetch_add(1);
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
    // Spin briefly (a decode step issues thousands of small parallel_for calls), then sleep.
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen && spins < kSpinIters) {
      if (spins < 2000)
        cpu_relax();
      else
        std::this_thread::yield();
      ++spins;
    }
    if (generation_.load(std::memory_order_acquire) == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_start_.wait(lk, [&] { return generation_.load() != seen; });
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    run_tasks(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int n_tasks, const std::function<void(int, int)>& fn) {
  if (n_tasks <= 0) return;
  if (workers_.empty() || n_tasks == 1) {
    for (int t = 0; t < n_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  n_tasks_ = n_tasks;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk(mu_);  // pairs with the sleeping workers' predicate check
    generation_.fetch_add(1, std::memory_order_release);
  }
  cv_start_.notify_all();
  run_tasks(0);
  // Wait for the workers: spin first, then yield (an oversubscribed machine must not burn our time slice).
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 2000)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

}  // namespace lily
