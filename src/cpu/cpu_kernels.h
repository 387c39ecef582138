// The CPU backend's swappable kernels: the reference (ref_ops) or the fast SIMD set, chosen once at start.
#pragma once
#include "model/weights.h"

namespace lily {

struct CpuKernels {
  const char* name;
  // Y[n, W.rows] = X[n, W.cols] * W^T
  void (*matmul)(const QMatrix& W, const float* X, int n, float* Y);
};

const CpuKernels& cpu_reference_kernels();

}  // namespace lily
