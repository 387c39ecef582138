#include "cpu/phase_profile.h"

#include <cstdio>

#include "core/env.h"

namespace lily {

PhaseProfile::PhaseProfile() : on(profile_mode_from_env() == ProfileMode::kPhases) {}

PhaseProfile::~PhaseProfile() {
  if (!on) return;
  static const char* names[] = {"attn_proj", "attn_core", "gdn_proj", "gdn_scan", "moe_router", "moe_experts",
                                "moe_other", "norms", "lm_head"};
  double total = 0;
  for (double v : seconds) total += v;
  std::fprintf(stderr, "cpu profile (s): total %.3f |", total);
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) std::fprintf(stderr, " %s %.3f", names[i], seconds[i]);
  std::fprintf(stderr, "\n");
}

}  // namespace lily
