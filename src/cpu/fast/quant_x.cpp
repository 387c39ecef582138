#include "cpu/fast/quant_x.h"

#include <algorithm>
#include <cmath>

namespace lily::fast {

void quantize_x(const float* X, int n, int cols, bool precise, QuantX& q) {
  q.n = n;
  q.G = cols / 64;
  q.P = (q.G + 1) / 2;
  const size_t pairs = static_cast<size_t>(n) * q.P;
  if (q.hi.size() < pairs * 128) q.hi.resize(pairs * 128);
  if (precise && q.lo.size() < pairs * 128) q.lo.resize(pairs * 128);
  if (q.dx.size() < pairs * 16) q.dx.resize(pairs * 16);
  if (q.sum.size() < static_cast<size_t>(n) * q.G) q.sum.resize(static_cast<size_t>(n) * q.G);
  if (q.dxg.size() < static_cast<size_t>(n) * q.G) q.dxg.resize(static_cast<size_t>(n) * q.G);
  for (int i = 0; i < n; ++i) {
    for (int p = 0; p < q.P; ++p) {
      int8_t* hi = &q.hi[(static_cast<size_t>(i) * q.P + p) * 128];
      int8_t* lo = precise ? &q.lo[(static_cast<size_t>(i) * q.P + p) * 128] : nullptr;
      float* dxl = &q.dx[(static_cast<size_t>(i) * q.P + p) * 16];
      for (int half = 0; half < 2; ++half) {
        const int g = 2 * p + half;
        if (g >= q.G) {  // odd group count: the pair's second half is empty
          for (int k = 0; k < 32; ++k) {
            hi[half * 32 + k] = hi[64 + half * 32 + k] = 0;
            if (lo) lo[half * 32 + k] = lo[64 + half * 32 + k] = 0;
          }
          for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = 0.0f;
          continue;
        }
        const float* x = X + static_cast<size_t>(i) * cols + static_cast<size_t>(g) * 64;
        float amax = 0.0f, s = 0.0f;
        for (int k = 0; k < 64; ++k) {
          amax = std::max(amax, std::fabs(x[k]));
          s += x[k];
        }
        q.sum[static_cast<size_t>(i) * q.G + g] = s;
        const float d = amax > 0.0f ? amax / 127.0f : 0.0f;
        const float inv = d > 0.0f ? 1.0f / d : 0.0f;
        for (int k = 0; k < 8; ++k) dxl[half * 8 + k] = d;
        q.dxg[static_cast<size_t>(i) * q.G + g] = d;
        for (int k = 0; k < 64; ++k) {
          const float v = x[k] * inv;
          const float h = std::nearbyint(v);
          // element k sits in nibble (k & 1) of byte k/2: even elements first, then odd ones
          const int slot = (k & 1) * 64 + half * 32 + (k >> 1);
          hi[slot] = static_cast<int8_t>(h);
          if (lo) lo[slot] = static_cast<int8_t>(std::nearbyint((v - h) * 254.0f));
        }
      }
    }
  }
}

}  // namespace lily::fast
