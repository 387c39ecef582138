#include "cpu/fast/cpu_isa.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace lily::fast {

namespace {

#if defined(__x86_64__)
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

Isa detect() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::Portable;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28);
  if (!osxsave || !avx) return Isa::Portable;
  const uint64_t x = xcr0();
  const bool ymm_state = (x & 0x6) == 0x6;      // SSE + AVX state saved by the OS
  const bool zmm_state = (x & 0xE6) == 0xE6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  if (!ymm_state || __get_cpuid_max(0, nullptr) < 7) return Isa::Portable;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = b & (1u << 5);
  const bool f = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30), vl = b & (1u << 31);
  const bool vnni = c & (1u << 11);
  if (zmm_state && f && dq && bw && vl && vnni) return Isa::Avx512;
  if (avx2 && fma) return Isa::Avx2;
  return Isa::Portable;
}
#else
Isa detect() { return Isa::Portable; }
#endif

}  // namespace

Isa detected_isa() {
  static const Isa v = detect();
  return v;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return "avx512";
    case Isa::Avx2: return "avx2";
    default: return "portable";
  }
}

Isa parse_isa(const char* s, Isa supported) {
  Isa want;
  if (!std::strcmp(s, "avx512"))
    want = Isa::Avx512;
  else if (!std::strcmp(s, "avx2"))
    want = Isa::Avx2;
  else if (!std::strcmp(s, "portable"))
    want = Isa::Portable;
  else
    throw Error(std::string("LILY_CPU_ISA=") + s + ": unknown tier (expected avx512, avx2 or portable)");
  if (static_cast<int>(want) > static_cast<int>(supported))
    throw Error(std::string("LILY_CPU_ISA=") + s + ": this CPU supports only up to " + isa_name(supported));
  return want;
}

namespace {
std::atomic<int> g_override{-1};
}

Isa active_isa() {
  const int o = g_override.load(std::memory_order_relaxed);
  if (o >= 0) return static_cast<Isa>(o);
  static const Isa v = [] {
    const char* e = std::getenv("LILY_CPU_ISA");
    return e && *e ? parse_isa(e, detected_isa()) : detected_isa();
  }();
  return v;
}

void set_isa_override(Isa isa) {
  g_override.store(static_cast<int>(parse_isa(isa_name(isa), detected_isa())), std::memory_order_relaxed);
}

void clear_isa_override() { g_override.store(-1, std::memory_order_relaxed); }

}  // namespace lily::fast
