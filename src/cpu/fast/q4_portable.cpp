// Portable 4-bit kernel: the same integer arithmetic as the SIMD kernels, in plain C++ (any CPU, incl. ARM).
#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

void q4_rows_portable(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * W.row_bytes();
    for (int i = 0; i < X.n; ++i) {
      float acc = 0.0f;
      for (int g = 0; g < X.G; ++g) {
        const int p = g / 2, half = g % 2;
        const size_t pi = static_cast<size_t>(i) * X.P + p;
        const int8_t* xh = &X.hi[pi * 128];
        const int8_t* xl = precise ? &X.lo[pi * 128] : nullptr;
        int32_t ih = 0, il = 0;
        for (int k = 0; k < 32; ++k) {
          const uint8_t byte = wr[g * 32 + k];
          const int a = byte & 0x0F, c = byte >> 4;
          ih += a * xh[half * 32 + k] + c * xh[64 + half * 32 + k];
          if (xl) il += a * xl[half * 32 + k] + c * xl[64 + half * 32 + k];
        }
        const float dot = static_cast<float>(ih) + static_cast<float>(il) * (1.0f / 254.0f);
        const float s = scale_at(W.scales, W.sdtype, r * X.G + g), b = scale_at(W.biases, W.sdtype, r * X.G + g);
        acc += s * X.dx[pi * 16 + half * 8] * dot + b * X.sum[static_cast<size_t>(i) * X.G + g];
      }
      Y[static_cast<size_t>(i) * W.rows + r] = acc;
    }
  }
}

}  // namespace lily::fast
