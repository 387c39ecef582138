// The LILY_* environment variables: parsers that make a bad value an error naming the variable and the value, the
// one profile variable both backends read (LILY_PROFILE), and the check that refuses retired names with the name
// that replaced them. Every variable is listed in docs/configuration.md; each backend parses its own once, when it
// is built (CudaOptions, PhaseProfile), and passes the result down: kernels and launchers read no environment.
#pragma once
#include <initializer_list>

namespace lily {

// `def` when unset or empty; else off for "0", "off" or "false".
bool env_on(const char* name, bool def);
// The index of the variable's value among `choices`; `def` when it is unset or empty; another value throws
// lily::Error listing the choices.
int env_choice(const char* name, std::initializer_list<const char*> choices, int def);
// A whole number in [lo, hi]; `def` when unset or empty.
long env_count(const char* name, long lo, long hi, long def);

// LILY_PROFILE: 0 (default) | 1 | trace | trace-blocks.
enum class ProfileMode {
  kOff,
  kPhases,       // 1: time per phase (CPU forward; CUDA decode kernels ungraphed with events, prefill phases)
  kTrace,        // trace: CUDA in-graph globaltimer stamps of the last decode step (no effect on the CPU)
  kTraceBlocks,  // trace-blocks: trace plus per-block stamps of the first DeltaNet layer's two MoE kernels
};
ProfileMode profile_mode_from_env();

// Throws lily::Error when a retired variable is set (to any value), naming the variable and value to use instead.
void reject_retired_env();

}  // namespace lily
