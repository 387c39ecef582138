// ggml block decoders (reference), affine repack and quantisers; layouts in gguf_quants.h.
#include "io/gguf_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace lily {

uint16_t gguf_f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);             // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);            // overflow (>= 65520) -> inf
  if (a < 0x38800000u) {                                            // subnormal half or zero
    if (a < 0x33000000u) return uint16_t(sign);                     // < 2^-25 rounds to 0
    const uint32_t e = a >> 23, man = (a & 0x7fffffu) | 0x800000u;
    const int shift = int(126 - e);  // value = man * 2^(e-150), half subnormal unit 2^-24: q = man >> (126-e)
    uint32_t q = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return uint16_t(sign | q);
  }
  uint32_t h = ((a >> 13) - ((127 - 15) << 10));
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return uint16_t(sign | h);
}

namespace {

float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

void put_h(uint8_t* p, float f) {
  const uint16_t h = gguf_f32_to_f16(f);
  std::memcpy(p, &h, 2);
}

// 4-bit code of element j (0..31) of a 32-element block's 16 nibble bytes.
int nib32(const uint8_t* qs, int j) { return j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4); }

int bit5(const uint8_t* qh, int j) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return int((h >> j) & 1u);
}

// Q4_K / Q5_K: 4-bit code of element e (0..255); Q5_K adds bit 4 from qh.
int k4_code(const uint8_t* qs, int e) {
  const int chunk = e / 64, w = e % 64;
  const uint8_t b = qs[chunk * 32 + (w % 32)];
  return w < 32 ? (b & 15) : (b >> 4);
}

int k5_high(const uint8_t* qh, int e) {
  const int chunk = e / 64, w = e % 64;
  const int bit = 2 * chunk + (w < 32 ? 0 : 1);
  return (qh[w % 32] >> bit) & 1;
}

int q6_code(const uint8_t* ql, const uint8_t* qh, int e) {
  const int half = e / 128, w = e % 128, t = w / 32, l = w % 32;
  const uint8_t lo = ql[half * 64 + l + (t & 1) * 32];
  const int low4 = t < 2 ? (lo & 15) : (lo >> 4);
  const int hi2 = (qh[half * 32 + l] >> (2 * t)) & 3;
  return low4 | (hi2 << 4);
}

}  // namespace

void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = uint8_t((q[j + 4] & 15) | ((q[j - 4] >> 6) << 4));
    *m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

bool gguf_can_decode(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q4_0: case GgmlType::Q4_1:
    case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0: case GgmlType::Q4_K: case GgmlType::Q5_K:
    case GgmlType::Q6_K: case GgmlType::Q8_K: return true;
    default: return false;
  }
}

void gguf_dequant_row(uint32_t type, const uint8_t* p, int64_t n, float* y) {
  GgmlTypeInfo ti;
  if (!gguf_can_decode(type) || !ggml_type_info(type, &ti))
    throw Error("no decoder for ggml type " + ggml_type_name(type));
  if (n % ti.block != 0) throw Error("gguf_dequant_row: " + std::to_string(n) + " is not a multiple of the block");
  for (int64_t b = 0; b < n / ti.block; ++b, p += ti.bytes, y += ti.block) {
    switch (GgmlType(type)) {
      case GgmlType::F32: std::memcpy(y, p, 4); break;
      case GgmlType::F16: *y = h2f(p); break;
      case GgmlType::BF16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        *y = bf16_to_f32(h);
        break;
      }
      case GgmlType::Q4_0: {
        const float d = h2f(p);
        for (int j = 0; j < 32; ++j) y[j] = d * float(nib32(p + 2, j) - 8);
        break;
      }
      case GgmlType::Q4_1: {
        const float d = h2f(p), m = h2f(p + 2);
        for (int j = 0; j < 32; ++j) y[j] = d * float(nib32(p + 4, j)) + m;
        break;
      }
      case GgmlType::Q5_0: {
        const float d = h2f(p);
        for (int j = 0; j < 32; ++j) y[j] = d * float((nib32(p + 6, j) | (bit5(p + 2, j) << 4)) - 16);
        break;
      }
      case GgmlType::Q5_1: {
        const float d = h2f(p), m = h2f(p + 2);
        for (int j = 0; j < 32; ++j) y[j] = d * float(nib32(p + 8, j) | (bit5(p + 4, j) << 4)) + m;
        break;
      }
      case GgmlType::Q8_0: {
        const float d = h2f(p);
        for (int j = 0; j < 32; ++j) y[j] = d * float(int8_t(p[2 + j]));
        break;
      }
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: {
        const bool five = GgmlType(type) == GgmlType::Q5_K;
        const float d = h2f(p), dmin = h2f(p + 2);
        const uint8_t* sc = p + 4;
        const uint8_t* qh = p + 16;
        const uint8_t* qs = five ? p + 48 : p + 16;
        for (int s = 0; s < 8; ++s) {
          uint8_t a, m;
          k_scale_min(s, sc, &a, &m);
          const float d1 = d * float(a), m1 = dmin * float(m);
          for (int e = 32 * s; e < 32 * s + 32; ++e) {
            const int q = k4_code(qs, e) + (five ? 16 * k5_high(qh, e) : 0);
            y[e] = d1 * float(q) - m1;
          }
        }
        break;
      }
      case GgmlType::Q6_K: {
        const float d = h2f(p + 208);
        const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
        for (int e = 0; e < 256; ++e) y[e] = d * float(sc[e / 16]) * float(q6_code(p, p + 128, e) - 32);
        break;
      }
      case GgmlType::Q8_K: {
        float d;
        std::memcpy(&d, p, 4);
        for (int e = 0; e < 256; ++e) y[e] = d * float(int8_t(p[4 + e]));
        break;
      }
      default: throw Error("no decoder for ggml type " + ggml_type_name(type));
    }
  }
}

// ---------------------------------------------------------------------------------------------- repack

bool gguf_repackable(uint32_t t) {
  switch (GgmlType(t)) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q4_K: case GgmlType::Q8_0: case GgmlType::Q5_0:
    case GgmlType::Q5_1: case GgmlType::Q5_K: case GgmlType::Q8_K: return true;
    default: return false;
  }
}

int gguf_repack_bits(uint32_t t) {
  const GgmlType g = GgmlType(t);
  return g == GgmlType::Q4_0 || g == GgmlType::Q4_1 || g == GgmlType::Q4_K ? 4 : 8;
}

void gguf_repack_row(uint32_t type, const uint8_t* p, int64_t n, uint32_t* words, float* scales, float* biases) {
  GgmlTypeInfo ti;
  if (!gguf_repackable(type) || !ggml_type_info(type, &ti))
    throw Error("ggml type " + ggml_type_name(type) + " cannot be repacked to affine");
  if (n % ti.block != 0) throw Error("gguf_repack_row: " + std::to_string(n) + " is not a multiple of the block");
  const int bits = gguf_repack_bits(type), per = 32 / bits;
  std::memset(words, 0, size_t(n / per) * 4);
  auto code = [&](int64_t e, int q) { words[e / per] |= uint32_t(q) << ((e % per) * bits); };
  int64_t e0 = 0;
  for (int64_t b = 0; b < n / ti.block; ++b, p += ti.bytes, e0 += ti.block) {
    switch (GgmlType(type)) {
      case GgmlType::Q4_0: {
        const float d = h2f(p);
        scales[e0 / 32] = d;
        biases[e0 / 32] = -8.0f * d;
        for (int j = 0; j < 32; ++j) code(e0 + j, nib32(p + 2, j));
        break;
      }
      case GgmlType::Q4_1:
        scales[e0 / 32] = h2f(p);
        biases[e0 / 32] = h2f(p + 2);
        for (int j = 0; j < 32; ++j) code(e0 + j, nib32(p + 4, j));
        break;
      case GgmlType::Q8_0: {
        const float d = h2f(p);
        scales[e0 / 32] = d;
        biases[e0 / 32] = -128.0f * d;
        for (int j = 0; j < 32; ++j) code(e0 + j, int(int8_t(p[2 + j])) + 128);
        break;
      }
      case GgmlType::Q4_K:
      case GgmlType::Q5_K: {
        const bool five = GgmlType(type) == GgmlType::Q5_K;
        const float d = h2f(p), dmin = h2f(p + 2);
        for (int s = 0; s < 8; ++s) {
          uint8_t a, m;
          k_scale_min(s, p + 4, &a, &m);
          scales[e0 / 32 + s] = d * float(a);
          biases[e0 / 32 + s] = -(dmin * float(m));
        }
        for (int e = 0; e < 256; ++e)
          code(e0 + e, five ? k4_code(p + 48, e) + 16 * k5_high(p + 16, e) : k4_code(p + 16, e));
        break;
      }
      case GgmlType::Q5_0: {
        const float d = h2f(p);
        scales[e0 / 32] = d;
        biases[e0 / 32] = -16.0f * d;
        for (int j = 0; j < 32; ++j) code(e0 + j, nib32(p + 6, j) | (bit5(p + 2, j) << 4));
        break;
      }
      case GgmlType::Q5_1:
        scales[e0 / 32] = h2f(p);
        biases[e0 / 32] = h2f(p + 2);
        for (int j = 0; j < 32; ++j) code(e0 + j, nib32(p + 8, j) | (bit5(p + 4, j) << 4));
        break;
      case GgmlType::Q8_K: {
        float d;
        std::memcpy(&d, p, 4);
        for (int g = 0; g < 8; ++g) scales[e0 / 32 + g] = d, biases[e0 / 32 + g] = -128.0f * d;
        for (int j = 0; j < 256; ++j) code(e0 + j, int(int8_t(p[4 + j])) + 128);
        break;
      }
      default: break;
    }
  }
}

void gguf_q6k_codes_row(const uint8_t* p, int64_t n, int8_t* codes, float* scales) {
  if (n % 256 != 0) throw Error("gguf_q6k_codes_row: " + std::to_string(n) + " is not a multiple of the block");
  for (int64_t e0 = 0; e0 < n; e0 += 256, p += 210) {
    const float d = h2f(p + 208);
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    for (int j = 0; j < 16; ++j) scales[e0 / 16 + j] = d * float(sc[j]);
    for (int e = 0; e < 256; ++e) codes[e0 + e] = int8_t(q6_code(p, p + 128, e) - 32);
  }
}

bool gguf_repack_ks8(uint32_t t) { return GgmlType(t) == GgmlType::Q4_K || GgmlType(t) == GgmlType::Q5_K; }

void gguf_repack_row_ks8(uint32_t type, const uint8_t* p, int64_t n, uint32_t* words, uint8_t* scales,
                         uint8_t* biases) {
  if (!gguf_repack_ks8(type)) throw Error("ggml type " + ggml_type_name(type) + " has no KS8 repack");
  thread_local std::vector<float> sc, bi;  // the f32 form, discarded (the codes are what is kept)
  sc.resize(size_t(n / 32) + 1);
  bi.resize(size_t(n / 32) + 1);
  gguf_repack_row(type, p, n, words, sc.data(), bi.data());  // checks n
  GgmlTypeInfo ti;
  ggml_type_info(type, &ti);
  for (int64_t b = 0; b < n / 256; ++b, p += ti.bytes, scales += 12, biases += 12) {
    const float d = h2f(p), mneg = -h2f(p + 2);
    std::memcpy(scales, &d, 4);
    std::memcpy(biases, &mneg, 4);
    for (int s = 0; s < 8; ++s) {
      uint8_t a, m;
      k_scale_min(s, p + 4, &a, &m);
      scales[4 + s] = a;  // 0..63: the same byte as int8
      biases[4 + s] = m;
    }
  }
}

// ---------------------------------------------------------------------------------------------- quantisers

namespace {

int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

void set_nib32(uint8_t* qs, int j, int q) {
  if (j < 16) qs[j] = uint8_t((qs[j] & 0xf0) | q);
  else qs[j - 16] = uint8_t((qs[j - 16] & 0x0f) | (q << 4));
}

void set_bit5(uint8_t* qh, int j, int bit) {
  if (bit) qh[j / 8] = uint8_t(qh[j / 8] | (1u << (j % 8)));  // little-endian u32: bit j in byte j/8
}

void pack_k_scales(const int* sc, const int* m, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    q[j + 8] = uint8_t((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
  }
}

// One Q4_K/Q5_K block (256 values, qmax 15 or 31).
void quant_k(const float* x, uint8_t* blk, bool five) {
  const int qmax = five ? 31 : 15;
  float ss[8], ms[8];  // sub-block scale and (non-negative) min offset
  for (int s = 0; s < 8; ++s) {
    float lo = 0.0f, hi = 0.0f;
    for (int j = 0; j < 32; ++j) lo = std::min(lo, x[32 * s + j]), hi = std::max(hi, x[32 * s + j]);
    ss[s] = (hi - lo) / float(qmax);
    ms[s] = -lo;
  }
  const float smax = *std::max_element(ss, ss + 8), mmax = *std::max_element(ms, ms + 8);
  const float d = f16_to_f32(gguf_f32_to_f16(smax / 63.0f)), dmin = f16_to_f32(gguf_f32_to_f16(mmax / 63.0f));
  int sc[8], mm[8];
  for (int s = 0; s < 8; ++s) {
    sc[s] = d > 0 ? clampi(int(std::ceil(ss[s] / d)), 0, 63) : 0;
    mm[s] = dmin > 0 ? clampi(int(std::lround(ms[s] / dmin)), 0, 63) : 0;
  }
  put_h(blk, d);
  put_h(blk + 2, dmin);
  pack_k_scales(sc, mm, blk + 4);
  uint8_t* qh = blk + 16;
  uint8_t* qs = five ? blk + 48 : blk + 16;
  for (int s = 0; s < 8; ++s) {
    const float step = d * float(sc[s]), off = dmin * float(mm[s]);
    for (int j = 0; j < 32; ++j) {
      const int e = 32 * s + j;
      const int q = step > 0 ? clampi(int(std::lround((x[e] + off) / step)), 0, qmax) : 0;
      const int chunk = e / 64, w = e % 64;
      uint8_t& b = qs[chunk * 32 + (w % 32)];
      b = uint8_t(w < 32 ? ((b & 0xf0) | (q & 15)) : ((b & 0x0f) | ((q & 15) << 4)));
      if (five && (q >> 4)) qh[w % 32] = uint8_t(qh[w % 32] | (1u << (2 * chunk + (w < 32 ? 0 : 1))));
    }
  }
}

void quant_q6k(const float* x, uint8_t* blk) {
  float ss[16];
  for (int s = 0; s < 16; ++s) {
    float a = 0.0f;
    for (int j = 0; j < 16; ++j) a = std::max(a, std::fabs(x[16 * s + j]));
    ss[s] = a / 31.0f;
  }
  const float smax = *std::max_element(ss, ss + 16);
  const float d = f16_to_f32(gguf_f32_to_f16(smax / 127.0f));
  auto* sc = reinterpret_cast<int8_t*>(blk + 192);
  for (int s = 0; s < 16; ++s) sc[s] = int8_t(d > 0 ? clampi(int(std::ceil(ss[s] / d)), 0, 127) : 0);
  put_h(blk + 208, d);
  uint8_t* ql = blk;
  uint8_t* qh = blk + 128;
  for (int e = 0; e < 256; ++e) {
    const float step = d * float(sc[e / 16]);
    const int q = step > 0 ? clampi(int(std::lround(x[e] / step)) + 32, 0, 63) : 32;
    const int half = e / 128, w = e % 128, t = w / 32, l = w % 32;
    uint8_t& lo = ql[half * 64 + l + (t & 1) * 32];
    lo = uint8_t(t < 2 ? ((lo & 0xf0) | (q & 15)) : ((lo & 0x0f) | ((q & 15) << 4)));
    qh[half * 32 + l] = uint8_t(qh[half * 32 + l] | ((q >> 4) << (2 * t)));
  }
}

}  // namespace

size_t gguf_row_bytes(GgmlType type, int64_t n) {
  GgmlTypeInfo ti;
  if (!ggml_type_info(uint32_t(type), &ti) || !gguf_can_decode(uint32_t(type)))
    throw Error("gguf_quantize: no quantiser for " + ggml_type_name(uint32_t(type)));
  if (n < 0 || n % ti.block != 0)
    throw Error("gguf_quantize: " + std::to_string(n) + " is not a multiple of the block");
  return size_t(n / ti.block) * size_t(ti.bytes);
}

std::vector<uint8_t> gguf_quantize(GgmlType type, const float* x, int64_t n) {
  std::vector<uint8_t> out(gguf_row_bytes(type, n));
  gguf_quantize_into(type, x, n, out.data());
  return out;
}

void gguf_quantize_into(GgmlType type, const float* x, int64_t n, uint8_t* out) {
  GgmlTypeInfo ti;
  std::memset(out, 0, gguf_row_bytes(type, n));  // checks the type and n; the quantisers OR bits into zeros
  ggml_type_info(uint32_t(type), &ti);
  for (int64_t b = 0; b < n / ti.block; ++b) {
    const float* v = x + b * ti.block;
    uint8_t* o = out + size_t(b) * size_t(ti.bytes);
    float lo = v[0], hi = v[0], amax = 0.0f;
    for (int j = 0; j < ti.block; ++j) lo = std::min(lo, v[j]), hi = std::max(hi, v[j]), amax = std::max(amax, std::fabs(v[j]));
    switch (type) {
      case GgmlType::F32: std::memcpy(o, v, 4); break;
      case GgmlType::F16: put_h(o, v[0]); break;
      case GgmlType::BF16: {
        const uint16_t h = f32_to_bf16(v[0]);
        std::memcpy(o, &h, 2);
        break;
      }
      case GgmlType::Q8_0: case GgmlType::Q4_0: case GgmlType::Q5_0: {
        const int qmax = type == GgmlType::Q8_0 ? 127 : type == GgmlType::Q4_0 ? 7 : 15;
        const float d = f16_to_f32(gguf_f32_to_f16(amax / float(qmax)));
        put_h(o, d);
        for (int j = 0; j < 32; ++j) {
          const int q = d > 0 ? clampi(int(std::lround(v[j] / d)), -qmax, qmax) : 0;
          if (type == GgmlType::Q8_0) o[2 + j] = uint8_t(int8_t(q));
          else if (type == GgmlType::Q4_0) set_nib32(o + 2, j, q + 8);
          else set_nib32(o + 6, j, (q + 16) & 15), set_bit5(o + 2, j, (q + 16) >> 4);
        }
        break;
      }
      case GgmlType::Q4_1: case GgmlType::Q5_1: {
        const int qmax = type == GgmlType::Q4_1 ? 15 : 31;
        const float d = f16_to_f32(gguf_f32_to_f16((hi - lo) / float(qmax))), m = f16_to_f32(gguf_f32_to_f16(lo));
        put_h(o, d);
        put_h(o + 2, m);
        for (int j = 0; j < 32; ++j) {
          const int q = d > 0 ? clampi(int(std::lround((v[j] - m) / d)), 0, qmax) : 0;
          if (type == GgmlType::Q4_1) set_nib32(o + 4, j, q);
          else set_nib32(o + 8, j, q & 15), set_bit5(o + 4, j, q >> 4);
        }
        break;
      }
      case GgmlType::Q4_K: quant_k(v, o, false); break;
      case GgmlType::Q5_K: quant_k(v, o, true); break;
      case GgmlType::Q6_K: quant_q6k(v, o); break;
      case GgmlType::Q8_K: {
        const float d = amax / 127.0f;
        std::memcpy(o, &d, 4);
        for (int j = 0; j < 256; ++j) o[4 + j] = uint8_t(int8_t(d > 0 ? clampi(int(std::lround(v[j] / d)), -127, 127) : 0));
        for (int g = 0; g < 16; ++g) {
          int16_t s = 0;
          for (int j = 0; j < 16; ++j) s = int16_t(s + int8_t(o[4 + 16 * g + j]));
          std::memcpy(o + 260 + 2 * g, &s, 2);
        }
        break;
      }
      default: throw Error("gguf_quantize: no quantiser for " + ggml_type_name(uint32_t(type)));
    }
  }
}

}  // namespace lily
