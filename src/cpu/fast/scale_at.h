// One group scale or bias of a quantised matrix as f32 (stored as bf16, f16 or f32).
#pragma once
#include <cstdint>

#include "core/dtype.h"

namespace lily::fast {

inline float scale_at(const void* p, DType t, int64_t i) { return decode_scalar(p, t, size_t(i)); }

}  // namespace lily::fast
