#include "cuda/common/phase_timer.h"

#include <algorithm>
#include <cstdio>

#include "cuda/common/cuda_check.h"

namespace lily::cuda {

PhaseTimer::~PhaseTimer() {
  for (auto& m : marks_) pool_.push_back(m.second);
  for (cudaEvent_t e : pool_) cudaEventDestroy(e);
}

void PhaseTimer::mark(const char* name, cudaStream_t s) {
  if (!on_) return;
  cudaEvent_t e;
  if (pool_.empty()) {
    LILY_CUDA_CHECK(cudaEventCreate(&e));
  } else {
    e = pool_.back();
    pool_.pop_back();
  }
  LILY_CUDA_CHECK(cudaEventRecord(e, s));
  marks_.emplace_back(name, e);
}

void PhaseTimer::collect() {
  if (!on_) return;
  for (size_t i = 0; i + 1 < marks_.size(); ++i) {
    if (!marks_[i].first) continue;
    float ms = 0;
    LILY_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[i].second, marks_[i + 1].second));
    auto& t = total_[marks_[i].first];
    t.first += ms;
    t.second += 1;
  }
  for (auto& m : marks_) pool_.push_back(m.second);
  marks_.clear();
}

void PhaseTimer::report(const char* title) const {
  if (!on_ || total_.empty()) return;
  std::vector<std::pair<std::string, std::pair<double, long>>> v(total_.begin(), total_.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  double sum = 0;
  for (auto& p : v) sum += p.second.first;
  std::fprintf(stderr, "%s: %.1f ms in phases\n", title, sum);
  for (auto& p : v)
    std::fprintf(stderr, "  %-14s %9.2f ms %5.1f%%  (%ld x %.3f ms)\n", p.first.c_str(), p.second.first,
                 100.0 * p.second.first / sum, p.second.second, p.second.first / double(p.second.second));
}

}  // namespace lily::cuda
