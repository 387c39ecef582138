#include "cpu/phase_profile.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace lily {

PhaseProfile::PhaseProfile() {
  const char* e = std::getenv("LILY_PROFILE");
  on = e && std::strcmp(e, "0") != 0;
}

PhaseProfile::~PhaseProfile() {
  if (!on) return;
  static const char* names[] = {"attention", "deltanet", "moe", "lm_head"};
  std::fprintf(stderr, "cpu profile (s):");
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) std::fprintf(stderr, " %s %.3f", names[i], seconds[i]);
  std::fprintf(stderr, "\n");
}

}  // namespace lily
