// A fixed pool of worker threads sized to the cores; parallel_for splits [0, n) into tasks taken by the
// workers and the calling thread. Nothing is allocated per call. One caller at a time.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lily {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // total threads including the caller
  ~ThreadPool();
  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // fn(task, thread_index) for task in [0, n_tasks); returns when all are done.
  void parallel_for(int n_tasks, const std::function<void(int task, int thread)>& fn);
  static ThreadPool& global();  // sized by LILY_THREADS or the hardware's core count

 private:
  void worker(int index);
  void run_tasks(int thread);
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_;
  const std::function<void(int, int)>* fn_ = nullptr;  // published by the generation_ increment
  int n_tasks_ = 0;
  std::atomic<int> next_{0};
  std::atomic<int> pending_{0};          // workers still busy with this generation
  std::atomic<uint64_t> generation_{0};  // bumped once per parallel_for (and at shutdown)
  bool stop_ = false;
};

}  // namespace lily
