#include "cpu/cpu_kernels.h"

#include "cpu/fast/fast_matmul.h"
#include "cpu/fast/seq_kernels.h"
#include "cpu/ref_ops.h"

namespace lily {

namespace {
void fast_precise(const QMatrix& W, const float* X, int n, float* Y) { fast::matmul(W, X, n, Y, true); }
void fast_int8(const QMatrix& W, const float* X, int n, float* Y) { fast::matmul(W, X, n, Y, false); }
}  // namespace

const CpuKernels& cpu_reference_kernels() {
  static const CpuKernels k{"ref", &ref::matmul, &ref::gdn_step, &ref::attention_one};
  return k;
}
const CpuKernels& cpu_fast_kernels() {
  static const CpuKernels k{"fast", &fast_precise, &fast::gdn_step, &fast::attention_one};
  return k;
}
const CpuKernels& cpu_fast_int8_kernels() {
  static const CpuKernels k{"fast8", &fast_int8, &fast::gdn_step, &fast::attention_one};
  return k;
}

}  // namespace lily
