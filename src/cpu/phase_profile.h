// Wall time per phase of the CPU forward pass, on when LILY_PROFILE=1 (printed to stderr at destruction).
#pragma once
#include <chrono>

namespace lily {

enum class Phase { kAttn, kGdn, kMoe, kLmHead, kCount };

struct PhaseProfile {
  PhaseProfile();
  ~PhaseProfile();
  bool on = false;
  double seconds[static_cast<int>(Phase::kCount)] = {};
};

class PhaseTimer {
 public:
  PhaseTimer(PhaseProfile& p, Phase ph) : p_(p), ph_(ph) {
    if (p_.on) t0_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (p_.on)
      p_.seconds[static_cast<int>(ph_)] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  PhaseProfile& p_;
  Phase ph_;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace lily
