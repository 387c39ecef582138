// Splits [0, n) into contiguous ranges and runs them on std::threads (one per hardware thread by default).
#pragma once
#include <cstdint>
#include <functional>

namespace lily {

int hardware_threads();  // std::thread::hardware_concurrency(), at least 1

// Calls fn(begin, end) on disjoint ranges covering [0, n); ranges are at least `grain` long. Runs on the
// calling thread when one range suffices. Rethrows the first exception a worker threw.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn, int threads = 0);

}  // namespace lily
