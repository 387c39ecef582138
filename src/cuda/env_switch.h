// Switches of the CUDA decode kernels read from the environment (by the launchers, once, into statics). A value
// that is not one of a switch's choices is an error naming the variable and the value.
#pragma once
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace lily::cuda {

// On unless the variable starts with '0'.
inline bool env_default_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && v[0] == '0');
}
// `def` when unset or empty; else off for "0", "off" or "false" (CudaOptions::from_env's switches).
inline bool env_on(const char* name, bool def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}
// The measured-slower switches: off unless the variable is "1".
inline bool env_is_one(const char* name) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, "1") == 0;
}
// The index of the variable's value among `choices`; `def` when it is unset or empty.
inline int env_choice(const char* name, std::initializer_list<const char*> choices, int def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  int i = 0;
  std::string list;
  for (const char* c : choices) {
    if (std::strcmp(v, c) == 0) return i;
    list += (i ? ", " : "") + std::string(c);
    ++i;
  }
  throw Error(std::string(name) + ": expected one of " + list + ", got '" + v + "'");
}
// A whole number in [lo, hi]; `def` when unset or empty.
inline long env_count(const char* name, long lo, long hi, long def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end || n < lo || n > hi)
    throw Error(std::string(name) + ": expected a whole number in " + std::to_string(lo) + ".." + std::to_string(hi) +
                ", got '" + v + "'");
  return n;
}
// Rows per warp in flight: 4 (unset or "4") or 2 ("2").
inline bool env_rows4(const char* name) { return env_choice(name, {"4", "2"}, 0) == 0; }
// LILY_CUDA_EARLY_TRIGGER=0: kernels that may signal their PDL dependents at entry (so the next kernel's blocks land
// beside them, where resources allow, and issue their weight loads while they run) signal after their own wait
// instead. Default on. (The dependents' griddepcontrol.wait still waits for this whole grid and its writes.)
inline bool early_trigger_on() {
  static const bool on = env_default_on("LILY_CUDA_EARLY_TRIGGER");
  return on;
}

}  // namespace lily::cuda
