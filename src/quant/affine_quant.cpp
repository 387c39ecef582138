#include "quant/affine_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"

namespace lily {

namespace {
bool ends_with(const std::string& s, const char* suf) {
  const size_t n = std::strlen(suf);
  return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}
}  // namespace

QuantChoice MlxRecipe::choose(const std::string& name) const {
  auto it = modules.find(name);
  if (it != modules.end()) return it->second;
  if (ends_with(name, ".mlp.gate") || ends_with(name, ".mlp.shared_expert_gate")) return gates;
  return base;
}

void check_quant_choice(const QuantChoice& q, const std::string& what) {
  if (q.bits < 2 || q.bits > 8 || q.bits == 7)
    throw Error(what + ": expected bits 2, 3, 4, 5, 6 or 8, found " + std::to_string(q.bits));
  if (q.group != 32 && q.group != 64 && q.group != 128)
    throw Error(what + ": expected group size 32, 64 or 128, found " + std::to_string(q.group));
}

void quantize_row_affine(const float* w, int64_t cols, int bits, int group, uint8_t* codes, uint16_t* scales,
                         uint16_t* biases) {
  const float levels = float((1 << bits) - 1);
  std::memset(codes, 0, size_t(cols) * size_t(bits) / 8);
  for (int64_t g = 0; g < cols / group; ++g) {
    const float* x = w + g * group;
    float lo = x[0], hi = x[0];
    for (int i = 1; i < group; ++i) {
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const uint16_t b16 = f32_to_bf16(lo);
    float s = (hi - lo) / levels;
    uint16_t s16 = f32_to_bf16(s);
    if (!(bf16_to_f32(s16) > 0.0f) || !std::isfinite(bf16_to_f32(s16))) s16 = f32_to_bf16(1.0f);
    scales[g] = s16;
    biases[g] = b16;
    const float sf = bf16_to_f32(s16), bf = bf16_to_f32(b16);
    for (int i = 0; i < group; ++i) {
      const float q = std::nearbyint((x[i] - bf) / sf);
      const uint32_t c = uint32_t(std::clamp(q, 0.0f, levels));
      const uint64_t bit = uint64_t(g * group + i) * uint64_t(bits);
      codes[bit / 8] |= uint8_t(c << (bit % 8));
      if (bit % 8 + uint64_t(bits) > 8) codes[bit / 8 + 1] |= uint8_t(c >> (8 - bit % 8));
    }
  }
}

}  // namespace lily
