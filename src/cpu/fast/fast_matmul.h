// Fast CPU matmul Y[n, W.rows] = X[n, W.cols] · Wᵀ, multi-threaded. `precise` keeps ~15-bit activations
// (results within ~1e-4 relative of f32); otherwise 8-bit activations (faster, ~1e-2 relative).
#pragma once
#include "model/weights.h"

namespace lily::fast {

bool is_q4g64(const QMatrix& W);
void matmul(const QMatrix& W, const float* X, int n, float* Y, bool precise);

}  // namespace lily::fast
