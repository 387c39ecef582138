// Host side of the XQ image (src/cuda/common/device_util.cuh, xq_put_chunk / load_xq_image): n elements (n % 32 == 0) as
// xh [n bytes] | xl [n bytes] | d [n/32 floats] | xs32 [n/32 floats] | km [n/32 words] | kv [4 n/32 floats]. Element
// e of chunk c is |d[c]| * (254 xh + xl), or, where d[c] is negated and bit e of km[c] set, the kept value kv[4c + k]
// (k: the set bits of km[c] below e); its byte sits in piece p = e / 16 (16-byte slot p * n/32 + c) at word
// ((e % 16) / 8) * 2 + e % 2, byte (e % 8) / 2.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lily::testcuda {

inline size_t xq_byte(int n, int c, int e) {
  const int p = e / 16, f = e % 16;
  return size_t(p * (n / 32) + c) * 16 + size_t(((f / 8) * 2 + f % 2) * 4 + (f % 8) / 2);
}

constexpr int kXqKeep = 4;  // as the device's

// The image of x, quantised as the device does, with its float operations in the same order (per 32-element chunk:
// amax = max|x|; the kept rule: big = {e : |x_e| > amax / 256}, rest = max|x| over the others, kept when 1 <= |big|
// <= 4 and rest > 0, then the big ones go to kv (codes 0) and rest replaces amax below; r = 1 / amax, xh = round(x *
// (127 r)), dx = amax * (1 / 127); xl = round(fma(-xh, dx, x) * (32258 r)), in [-127, 127] by construction; d = dx
// * (1 / 254), negated when kept; xs32 = the chunk's sum): the same codes and scales as the device's.
inline std::vector<uint8_t> xq_encode(const std::vector<float>& x) {
  const int n = int(x.size()), nch = n / 32;
  std::vector<uint8_t> img(size_t(n) * 2 + size_t(nch) * (12 + 4 * kXqKeep), 0);
  std::vector<float> d(size_t(nch) * (3 + kXqKeep), 0.f);
  std::vector<uint32_t> km(size_t(nch), 0);
  for (int c = 0; c < nch; ++c) {
    const float* xc = x.data() + size_t(c) * 32;
    float amax = 0.f, sum = 0.f;
    for (int e = 0; e < 32; ++e) amax = std::max(amax, std::fabs(xc[e]));
    for (int e = 0; e < 32; ++e) sum += xc[e];
    uint32_t big = 0;
    float rest = 0.f;
    for (int e = 0; e < 32; ++e) {
      if (std::fabs(xc[e]) > amax * (1.f / 256.f)) big |= 1u << e;
      else rest = std::max(rest, std::fabs(xc[e]));
    }
    const int nbig = __builtin_popcount(big);
    const bool keep = nbig >= 1 && nbig <= kXqKeep && rest > 0.f;
    const float a = keep ? rest : amax;
    const float dx = a * (1.f / 127.f);
    const float ra = a > 0.f ? 1.f / a : 0.f, inv = 127.f * ra, inv2 = 32258.f * ra;
    int k = 0;
    for (int e = 0; e < 32; ++e) {
      const bool kept = keep && ((big >> e) & 1u);
      if (kept) d[size_t(3 * nch + c * kXqKeep + k++)] = xc[e];
      const float v = kept ? 0.f : xc[e];
      const float h = std::nearbyint(v * inv);
      const float l = std::nearbyint(std::fma(-h, dx, v) * inv2);
      img[xq_byte(n, c, e)] = uint8_t(int8_t(h));
      img[size_t(n) + xq_byte(n, c, e)] = uint8_t(int8_t(l));
    }
    d[size_t(c)] = keep ? -(dx * (1.f / 254.f)) : dx * (1.f / 254.f);
    d[size_t(nch + c)] = sum;
    if (keep) km[size_t(c)] = big;
  }
  std::memcpy(img.data() + size_t(n) * 2, d.data(), size_t(2 * nch) * 4);
  std::memcpy(img.data() + size_t(n) * 2 + size_t(2 * nch) * 4, km.data(), size_t(nch) * 4);
  std::memcpy(img.data() + size_t(n) * 2 + size_t(3 * nch) * 4, d.data() + 3 * nch, size_t(nch * kXqKeep) * 4);
  return img;
}

// Element values and chunk sums (xs32) of an image of n elements.
inline void xq_decode(const std::vector<uint8_t>& img, int n, std::vector<float>& x, std::vector<float>& xs32) {
  const int nch = n / 32;
  std::vector<float> d(size_t(nch) * (3 + kXqKeep));
  std::memcpy(d.data(), img.data() + size_t(n) * 2, d.size() * 4);
  std::vector<uint32_t> km(static_cast<size_t>(nch));
  std::memcpy(km.data(), img.data() + size_t(n) * 2 + size_t(2 * nch) * 4, km.size() * 4);
  x.assign(size_t(n), 0.f);
  xs32.assign(d.begin() + nch, d.begin() + 2 * nch);
  for (int c = 0; c < nch; ++c) {
    const bool marked = std::signbit(d[size_t(c)]);
    int k = 0;
    for (int e = 0; e < 32; ++e) {
      const int h = int8_t(img[xq_byte(n, c, e)]), l = int8_t(img[size_t(n) + xq_byte(n, c, e)]);
      x[size_t(c) * 32 + e] = marked && ((km[size_t(c)] >> e) & 1u) ? d[size_t(3 * nch + c * kXqKeep + k++)]
                                                                      : std::fabs(d[size_t(c)]) * float(254 * h + l);
    }
  }
}

}  // namespace lily::testcuda
