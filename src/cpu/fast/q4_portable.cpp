// Portable 4-bit kernel: the same integer arithmetic as the SIMD kernels, in plain C++ (any CPU, incl. ARM).
// Groups of 64, or of 32 (each half of a 64-element activation group with its own scale, bias and Σx).
#include "core/dtype.h"
#include "cpu/fast/scale_at.h"
#include "cpu/fast/q4_kernels.h"

namespace lily::fast {

void q4_rows_portable(const QMatrix& W, int64_t r0, int64_t r1, const QuantX& X, bool precise, float* Y) {
  const int sub = W.group == 32 ? 2 : 1;  // weight groups per activation group
  const int NG = X.G * sub;               // weight groups per row
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = static_cast<const uint8_t*>(W.w) + r * W.row_bytes();
    for (int i = 0; i < X.n; ++i) {
      float acc = 0.0f;
      for (int g = 0; g < X.G; ++g) {
        const int p = g / 2, half = g % 2;
        const size_t pi = static_cast<size_t>(i) * X.P + p;
        const int8_t* xh = &X.hi[pi * 128];
        const int8_t* xl = precise ? &X.lo[pi * 128] : nullptr;
        for (int h = 0; h < sub; ++h) {
          int32_t ih = 0, il = 0;
          for (int k = h * 32 / sub; k < (h + 1) * 32 / sub; ++k) {  // code bytes of this weight group
            const uint8_t byte = wr[g * 32 + k];
            const int a = byte & 0x0F, c = byte >> 4;
            ih += a * xh[half * 32 + k] + c * xh[64 + half * 32 + k];
            if (xl) il += a * xl[half * 32 + k] + c * xl[64 + half * 32 + k];
          }
          const float dot = static_cast<float>(ih) + static_cast<float>(il) * (1.0f / 254.0f);
          const int64_t wg = r * NG + g * sub + h;
          const float s = scale_at(W.scales, W.sdtype, wg), b = scale_at(W.biases, W.sdtype, wg);
          const size_t gi = static_cast<size_t>(i) * X.G + g, hi2 = static_cast<size_t>(i) * NG + g * 2 + h;
          const float xs = sub == 2 ? X.sum32[hi2] : X.sum[gi], r8 = sub == 2 ? X.res8_32[hi2] : X.res8[gi];
          acc += s * X.dx[pi * 16 + half * 8] * dot + b * xs + s * r8;  // quant_x.h: res8 centres the codes
        }
      }
      Y[static_cast<size_t>(i) * W.rows + r] = acc;
    }
  }
}

}  // namespace lily::fast
