// One group scale or bias of a quantised matrix as f32 (stored as bf16, f16 or f32).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace lily::fast {

inline float scale_at(const void* p, DType t, int64_t i) {
  if (t == DType::BF16) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  if (t == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

}  // namespace lily::fast
