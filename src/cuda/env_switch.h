// Parsers of the LILY_CUDA_* variables, used by CudaOptions::from_env only (kernels and launchers read no
// environment). A value that is not one of a variable's choices is an error naming the variable and the value.
#pragma once
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>

#include "core/error.h"

namespace lily::cuda {

// `def` when unset or empty; else off for "0", "off" or "false" (CudaOptions::from_env's switches).
inline bool env_on(const char* name, bool def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
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

}  // namespace lily::cuda
