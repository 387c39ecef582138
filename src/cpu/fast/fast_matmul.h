// Fast CPU matmul Y[n, W.rows] = X[n, W.cols] · Wᵀ, multi-threaded. `precise` keeps ~15-bit activations
// (results within ~1e-4 relative of f32; what the `cpu` backend uses); otherwise 8-bit activations (~1e-2
// relative: too coarse for the model, see docs/cpu-backend.md, "Accuracy"; only the kernel tests run it).
#pragma once
#include "model/weights.h"

namespace lily::fast {

// 4-bit affine with groups of 64 or 32 (at most 256 groups of 64 per row): the integer kernels.
bool is_q4_integer(const QMatrix& W);
void matmul(const QMatrix& W, const float* X, int n, float* Y, bool precise);

// Several independent products in one pass over the thread pool (one synchronisation instead of one per
// matrix): Y = X · Wᵀ for each job. Jobs sharing the same X are quantised once.
struct MatJob {
  const QMatrix* W;
  const float* X;  // [n, W->cols]
  int n;
  float* Y;        // [n, W->rows]
};
void matmul_batch(const MatJob* jobs, int count, bool precise);

}  // namespace lily::fast
