// Which SIMD tier the fast CPU kernels run: chosen once from cpuid (with the OS's support of the vector
// register state, via xgetbv), or forced with LILY_CPU_ISA=avx512|avx2|portable (tests, measurements).
#pragma once

namespace lily::fast {

enum class Isa { Portable, Avx2, Avx512 };

// What this CPU and OS support (cpuid + xgetbv): Avx512 needs F, BW, VL, DQ and VNNI with the zmm/opmask
// state enabled; Avx2 needs AVX2 and FMA with the ymm state enabled. Portable everywhere else (and off x86).
Isa detected_isa();
// The tier in use: detected_isa(), or LILY_CPU_ISA when set. Throws lily::Error when LILY_CPU_ISA names an
// unknown tier or one this CPU cannot run (the first call decides; later calls return the same).
Isa active_isa();
const char* isa_name(Isa isa);
// Tests: run a lower tier in this process from now on (throws lily::Error above detected_isa()); clear to
// return to active_isa()'s own choice. Not for use while kernels run on other threads.
void set_isa_override(Isa isa);
void clear_isa_override();
// Parses "avx512" / "avx2" / "portable"; throws lily::Error on anything else or on a tier above `supported`.
Isa parse_isa(const char* s, Isa supported);

}  // namespace lily::fast
