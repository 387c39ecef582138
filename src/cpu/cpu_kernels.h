// The CPU backend's swappable kernels: the reference (ref_ops) or the fast SIMD set, chosen once at start.
#pragma once
#include "cpu/fast/fast_matmul.h"
#include "model/weights.h"

namespace lily {

struct CpuKernels {
  const char* name;
  // Y[n, W.rows] = X[n, W.cols] * W^T
  void (*matmul)(const QMatrix& W, const float* X, int n, float* Y);
  // several independent products (one pool synchronisation for all in the fast set)
  void (*matmul_batch)(const fast::MatJob* jobs, int count);
  // ref::gdn_scan / ref::attention_one contracts (see cpu/ref_ops.h)
  void (*gdn_scan)(float* S, const float* q, const float* k, const float* v, size_t xs, const float* g,
                   const float* beta, int n, int Hk, int Hv, int Dk, int Dv, float* o, float* snaps, int n_snaps);
  void (*attention_one)(const float* q, const float* kcache, const float* vcache, int T, int nq, int nkv, int hd,
                        float* out);
};

const CpuKernels& cpu_reference_kernels();  // f32 reference (ref_ops), double accumulation
const CpuKernels& cpu_fast_kernels();       // SIMD + threads, ~15-bit activations (near-f32 results)

}  // namespace lily
