// Host model of the CUDA decode path's int8 activations (src/cuda/common/device_util.cuh, XQ): x per 32-element chunk as
// d * (254*h + l), h = round(x/dx), dx = max|x|/127, l = round((x - h*dx) * 254/dx), d = dx/254, and the 4-bit
// GEMV as sum over groups of s*Sum(q x~) + b*Sum(x) (bias with the exact x). Kernel tests compare the int8 path
// against this model (rounding-level bounds) as well as against the exact reference.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "model/weights.h"

namespace lily::testing_int8x {

inline std::vector<float> quant_hilo(const float* x, int n, int chunk = 32) {  // chunk: elements per scale
  std::vector<float> q(size_t(n), 0.f);
  for (int c = 0; c < n; c += chunk) {
    float amax = 0.f;
    for (int i = c; i < c + chunk; ++i) amax = std::max(amax, std::fabs(x[i]));
    const float dx = amax * (1.f / 127.f);
    const float inv = amax > 0.f ? 127.f / amax : 0.f, inv2 = amax > 0.f ? 32258.f / amax : 0.f;
    const float d = dx * (1.f / 254.f);
    for (int i = c; i < c + chunk; ++i) {
      const float h = std::rint(x[i] * inv);
      const float l = std::clamp(std::rint(std::fma(-h, dx, x[i]) * inv2), -127.f, 127.f);
      q[size_t(i)] = float(254.0 * h + l) * d;
    }
  }
  return q;
}

// y = W x for a 4-bit affine QMatrix (scales/biases of any stored type: the device twins keep f32) with x
// already quantised (xq, by quant_hilo, possibly as
// part of a longer vector) and the exact x for the bias sums.
inline void matvec_hilo_prequant(const QMatrix& m, const float* xq, const float* x, float* y) {
  const int cols = int(m.cols), G = m.group;
  const auto* w = static_cast<const uint32_t*>(m.w);
  for (int64_t r = 0; r < m.rows; ++r) {
    double acc = 0;
    for (int g = 0; g < cols / G; ++g) {
      double sq = 0, sx = 0;
      for (int c = g * G; c < (g + 1) * G; ++c) {
        const uint32_t q = (w[(r * cols + c) / 8] >> (4 * (c % 8))) & 15u;
        sq += double(q) * xq[c];
        sx += x[c];
      }
      const size_t gi = size_t(r) * (cols / G) + size_t(g);
      acc += double(decode_scalar(m.scales, m.sdtype, gi)) * sq + double(decode_scalar(m.biases, m.sdtype, gi)) * sx;
    }
    y[r] = float(acc);
  }
}

// y = W x through the int8 activation model (x quantised in 32-element chunks from its start).
inline void matvec_hilo(const QMatrix& m, const float* x, float* y) {
  const std::vector<float> xq = quant_hilo(x, int(m.cols));
  matvec_hilo_prequant(m, xq.data(), x, y);
}

}  // namespace lily::testing_int8x
