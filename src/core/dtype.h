// Element types found in checkpoints, and bf16/f16 <-> f32 conversion.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace lily {

enum class DType { F32, F16, BF16, U32, I32, I64, U8, I8, F64, BOOL, U16, I16, U64, F8_E4M3, F8_E5M2 };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses a safetensors dtype string ("F32", "BF16", ...). Returns false if unknown.
bool dtype_from_string(const std::string& s, DType* out);

inline float bf16_to_f32(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t f32_to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);  // round to nearest even; overflow to infinity, NaN stays NaN

// FP8 E4M3 (OCP "fn": no infinities, S.1111.111 is NaN; max 448) to f32, exact.
float f8e4m3_to_f32(uint8_t v);

// Element i of a float array of type t (F32, BF16, F16 or F8_E4M3) as f32. The one scalar decoder every reader
// of checkpoint floats uses (norms, scales, dense rows, uploads); reads through memcpy, so `p` needs no alignment.
// Other types return NaN (callers check the dtype first).
inline float decode_scalar(const void* p, DType t, size_t i) {
  const auto* b = static_cast<const uint8_t*>(p);
  switch (t) {
    case DType::F32: {
      float f;
      std::memcpy(&f, b + 4 * i, 4);
      return f;
    }
    case DType::BF16:
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, b + 2 * i, 2);
      return t == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
    case DType::F8_E4M3: return f8e4m3_to_f32(b[i]);
    default: return __builtin_nanf("");
  }
}

}  // namespace lily
