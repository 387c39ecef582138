// PhaseTimer: GPU time per named phase of a stream's work, from CUDA events recorded at phase boundaries
// (prefill, with LILY_PROFILE=1). mark(name, s) closes the phase opened by the previous mark and opens `name`;
// collect() (after the stream is synchronised) adds the intervals to the totals; report() prints them.
#pragma once
#include <cuda_runtime_api.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lily::cuda {

class PhaseTimer {
 public:
  explicit PhaseTimer(bool on) : on_(on) {}
  ~PhaseTimer();
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;
  bool on() const { return on_; }
  void mark(const char* name, cudaStream_t s);  // name == nullptr: close the open phase only
  void collect();                               // stream synchronised: accumulate and recycle the events
  void report(const char* title) const;

 private:
  bool on_;
  std::vector<cudaEvent_t> pool_;
  std::vector<std::pair<const char*, cudaEvent_t>> marks_;  // pending boundaries (name of the phase they open)
  std::map<std::string, std::pair<double, long>> total_;    // name -> (ms, count)
};

}  // namespace lily::cuda
