// Element types found in checkpoints, and bf16/f16 <-> f32 conversion.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace lily {

// KS8 is lily's own form of K-quant group scales, never read from a file: per 8 consecutive values a block of
// 12 bytes, an f32 multiplier then 8 int8 factors; value i = multiplier(i / 8) * factor(i % 8). GGUF Q4_K / Q5_K
// scales d * sc and mins -dmin * m are kept so (exactly, 0.375 bits per weight each instead of 1 in f32).
enum class DType { F32, F16, BF16, U32, I32, I64, U8, I8, F64, BOOL, U16, I16, U64, F8_E4M3, F8_E5M2, KS8 };

size_t dtype_size(DType t);  // bytes per element; 0 for KS8 (use scale_bytes)
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

// Element i of a float array of type t (F32, BF16, F16, F8_E4M3 or KS8) as f32. The one scalar decoder every reader
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
    case DType::KS8: {
      float m;
      std::memcpy(&m, b + 12 * (i / 8), 4);
      return m * float(int8_t(b[12 * (i / 8) + 4 + i % 8]));
    }
    default: return __builtin_nanf("");
  }
}

// Bytes of n scales of type t (KS8: n a multiple of 8, 12 bytes per 8).
inline size_t scale_bytes(DType t, size_t n) { return t == DType::KS8 ? (n + 7) / 8 * 12 : n * dtype_size(t); }

}  // namespace lily
