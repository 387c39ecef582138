#include "cpu/cpu_kernels.h"

#include "cpu/fast/fast_matmul.h"
#include "cpu/fast/seq_kernels.h"
#include "cpu/ref_ops.h"

namespace lily {

namespace {
void fast_precise(const QMatrix& W, const float* X, int n, float* Y) { fast::matmul(W, X, n, Y, true); }
void fast_batch_precise(const fast::MatJob* j, int count) { fast::matmul_batch(j, count, true); }
void ref_batch(const fast::MatJob* j, int count) {
  for (int i = 0; i < count; ++i) ref::matmul(*j[i].W, j[i].X, j[i].n, j[i].Y);
}
}  // namespace

const CpuKernels& cpu_reference_kernels() {
  static const CpuKernels k{"ref", &ref::matmul, &ref_batch, &ref::gdn_scan, &ref::attention_one};
  return k;
}
const CpuKernels& cpu_fast_kernels() {
  static const CpuKernels k{"fast", &fast_precise, &fast_batch_precise, &fast::gdn_scan, &fast::attention_one};
  return k;
}

}  // namespace lily
