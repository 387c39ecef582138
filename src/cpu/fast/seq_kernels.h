// Fast CPU versions of the per-token sequence kernels (same contracts as ref::gdn_step and
// ref::attention_one), multi-threaded over heads, AVX-512 when present (else the reference code).
#pragma once

namespace lily::fast {

void gdn_step(float* S, const float* q, const float* k, const float* v, const float* g, const float* beta,
              int Hk, int Hv, int Dk, int Dv, float* o);
// ref::gdn_scan contract. Head-major: each thread keeps one value head's state (64 KiB) in cache for all n
// tokens instead of sweeping every head's state (2 MiB per layer) once per token; a head's snapshots are copied
// from it while it is in cache.
void gdn_scan(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g, const float* beta,
              int n, int Hk, int Hv, int Dk, int Dv, float* o, float* snaps = nullptr, int n_snaps = 0);
void attention_one(const float* q, const float* kcache, const float* vcache, int T, int nq, int nkv, int hd,
                   float* out);

}  // namespace lily::fast
