#include "core/dtype.h"

namespace lily {

namespace {
struct Entry {
  DType t;
  const char* name;
  size_t size;
};
constexpr Entry kTable[] = {
    {DType::F32, "F32", 4},   {DType::F16, "F16", 2},         {DType::BF16, "BF16", 2},
    {DType::U32, "U32", 4},   {DType::I32, "I32", 4},         {DType::I64, "I64", 8},
    {DType::U8, "U8", 1},     {DType::I8, "I8", 1},           {DType::F64, "F64", 8},
    {DType::BOOL, "BOOL", 1}, {DType::U16, "U16", 2},         {DType::I16, "I16", 2},
    {DType::U64, "U64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};
}  // namespace

size_t dtype_size(DType t) {
  for (const auto& e : kTable)
    if (e.t == t) return e.size;
  return 0;
}

const char* dtype_name(DType t) {
  if (t == DType::KS8) return "KS8";  // not in kTable: never parsed from a file
  for (const auto& e : kTable)
    if (e.t == t) return e.name;
  return "?";
}

bool dtype_from_string(const std::string& s, DType* out) {
  for (const auto& e : kTable)
    if (s == e.name) {
      *out = e.t;
      return true;
    }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while (!(man & 0x400u)) {
        man <<= 1;
        --exp;
      }
      man &= 0x3ffu;
      u = sign | (exp << 23) | (man << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);      // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);     // rounds to >= 65520: infinity
  if (a < 0x38800000u) {                                     // below 2^-14: subnormal (or zero)
    if (a < 0x33000000u) return sign;                        // below half the smallest subnormal
    const uint32_t man = (a & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(a >> 23);                    // 14..24
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = ((a >> 23) - 112u) << 10 | ((a >> 13) & 0x3ffu);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

float f8e4m3_to_f32(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80u) << 24;
  const uint32_t exp = (v >> 3) & 0xfu, man = v & 0x7u;
  uint32_t u;
  if (exp == 0xf && man == 0x7) {
    u = sign | 0x7fc00000u;  // NaN
  } else if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: man * 2^-9
      float f = float(man) * (1.0f / 512.0f);
      std::memcpy(&u, &f, 4);
      u |= sign;
    }
  } else {
    u = sign | ((exp - 7 + 127) << 23) | (man << 20);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace lily
