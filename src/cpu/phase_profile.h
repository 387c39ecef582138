// Wall time per phase of the CPU forward pass, on when LILY_PROFILE=1 (printed to stderr at destruction; the
// trace values of LILY_PROFILE are CUDA stamps, no profile here; another value throws).
#pragma once
#include <chrono>

namespace lily {

// Non-overlapping: projections (the 4-bit matmuls) apart from the sequence work of each mixer.
enum class Phase { kAttnProj, kAttnCore, kGdnProj, kGdnScan, kMoeRouter, kMoeExperts, kMoeOther, kNorms, kLmHead, kCount };

struct PhaseProfile {
  PhaseProfile();
  ~PhaseProfile();
  bool on = false;
  double seconds[static_cast<int>(Phase::kCount)] = {};
};

// Times its scope; stop() / start() pause and resume it within the scope.
class PhaseTimer {
 public:
  PhaseTimer(PhaseProfile& p, Phase ph) : p_(p), ph_(ph) { start(); }
  ~PhaseTimer() { stop(); }
  void start() {
    if (p_.on && !running_) {
      t0_ = std::chrono::steady_clock::now();
      running_ = true;
    }
  }
  void stop() {
    if (p_.on && running_) {
      p_.seconds[static_cast<int>(ph_)] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      running_ = false;
    }
  }

 private:
  PhaseProfile& p_;
  Phase ph_;
  bool running_ = false;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace lily
