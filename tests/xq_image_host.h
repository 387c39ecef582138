// Host side of the XQ image (src/cuda/common/device_util.cuh, xq_put_chunk / load_xq_image): n elements (n % 32 == 0) as
// xh [n bytes] | xl [n bytes] | d [n/32 floats] | xs32 [n/32 floats]. Element e of chunk c is d[c] * (254 xh + xl);
// its byte sits in piece p = e / 16 (16-byte slot p * n/32 + c) at word ((e % 16) / 8) * 2 + e % 2, byte (e % 8) / 2.
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

// The image of x, quantised as the device does, with its float operations in the same order (per 32-element chunk:
// r = 1 / max|x|, xh = round(x * (127 r)), dx = max|x| * (1 / 127); xl = round(fma(-xh, dx, x) * (32258 r)), in
// [-127, 127] by construction; d = dx * (1 / 254); xs32 = the chunk's sum): the same codes and scales as the device's.
inline std::vector<uint8_t> xq_encode(const std::vector<float>& x) {
  const int n = int(x.size());
  std::vector<uint8_t> img(size_t(n) * 2 + size_t(n / 32) * 8, 0);
  std::vector<float> d(size_t(n / 32) * 2);
  for (int c = 0; c < n / 32; ++c) {
    float amax = 0.f, sum = 0.f;
    for (int e = 0; e < 32; ++e) {
      amax = std::max(amax, std::fabs(x[size_t(c) * 32 + e]));
      sum += x[size_t(c) * 32 + e];
    }
    const float dx = amax * (1.f / 127.f);
    const float ra = amax > 0.f ? 1.f / amax : 0.f, inv = 127.f * ra, inv2 = 32258.f * ra;
    for (int e = 0; e < 32; ++e) {
      const float v = x[size_t(c) * 32 + e];
      const float h = std::nearbyint(v * inv);
      const float l = std::nearbyint(std::fma(-h, dx, v) * inv2);
      img[xq_byte(n, c, e)] = uint8_t(int8_t(h));
      img[size_t(n) + xq_byte(n, c, e)] = uint8_t(int8_t(l));
    }
    d[size_t(c)] = dx * (1.f / 254.f);
    d[size_t(n / 32 + c)] = sum;
  }
  std::memcpy(img.data() + size_t(n) * 2, d.data(), d.size() * 4);
  return img;
}

// Element values and chunk sums (xs32) of an image of n elements.
inline void xq_decode(const std::vector<uint8_t>& img, int n, std::vector<float>& x, std::vector<float>& xs32) {
  std::vector<float> d(size_t(n / 32) * 2);
  std::memcpy(d.data(), img.data() + size_t(n) * 2, d.size() * 4);
  x.assign(size_t(n), 0.f);
  xs32.assign(d.begin() + n / 32, d.end());
  for (int c = 0; c < n / 32; ++c)
    for (int e = 0; e < 32; ++e) {
      const int h = int8_t(img[xq_byte(n, c, e)]), l = int8_t(img[size_t(n) + xq_byte(n, c, e)]);
      x[size_t(c) * 32 + e] = d[size_t(c)] * float(254 * h + l);
    }
}

}  // namespace lily::testcuda
