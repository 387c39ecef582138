#include "core/parallel.h"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lily {

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : int(n);
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn, int threads) {
  if (n <= 0) return;
  if (threads <= 0) threads = hardware_threads();
  grain = std::max<int64_t>(grain, 1);
  int64_t parts = std::min<int64_t>(threads, (n + grain - 1) / grain);
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  std::exception_ptr err;
  std::mutex mu;
  int64_t per = (n + parts - 1) / parts;
  for (int64_t p = 0; p < parts; ++p) {
    int64_t b = p * per, e = std::min(n, b + per);
    if (b >= e) break;
    pool.emplace_back([&, b, e] {
      try {
        fn(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err) err = std::current_exception();
      }
    });
  }
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace lily
