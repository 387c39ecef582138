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

}  // namespace lily
