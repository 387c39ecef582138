// Random affine matrices for the CUDA kernel tests in every form the loaders produce: 4- or 8-bit codes, groups of
// 32, 64 or 128, and (scale, bias) as bf16 (MLX), as f32 with bias = -z * scale (GPTQ / AWQ / compressed-tensors
// int4, GGUF Q4_0 / Q5_0 / Q8_0 repacks: f16 scales, integer zero points) or as f32 with an independent bias
// (GGUF Q4_K / Q5_K / Q4_1). Uploaded through the backend's own path (describe_matrix / copy_matrix), with a host
// "twin" whose f32 scales hold the bf16 pairs the device keeps (model/affine_pair.h), or for 4-bit f32 scales with
// bias -z * scale (kQ4Z) the scale to 2^-20 and its exact bias, or for other f32 scales (kQ4H / kQ8H) the fp16 pair:
// the reference for the kernels.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "cuda/weight_upload.h"
#include "cuda_test_buffers.h"
#include "model/affine_pair.h"
#include "model/weights.h"

namespace lily::testcuda {

enum class Origin { Bf16, F32Zero, F32Free };
inline const char* origin_name(Origin o) {
  return o == Origin::Bf16 ? "bf16" : o == Origin::F32Zero ? "f32zero" : "f32free";
}

// n matrices [rows, cols] of one form stored back to back. src: as a loader gives them; twin: the device's pairs.
struct FormStack {
  std::vector<uint32_t> w;
  std::vector<uint16_t> s16, b16;
  std::vector<float> s32, b32, ts, tb;
  std::vector<QMatrix> src, twin;
  cuda::DStack d;
};

// Dense bf16 matrices get kind Dense (bits 16); every other `bits` is affine.
inline void make_form(FormStack& st, int n, int rows, int cols, int bits, int group, Origin o, std::mt19937& rng,
                      Dev& dev) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t elems = size_t(rows) * size_t(cols);
  if (bits == 16) {
    st.s16.resize(elems * size_t(n));
    for (auto& v : st.s16) v = f32_to_bf16(0.05f * u(rng));
    for (int e = 0; e < n; ++e) {
      QMatrix m;
      m.kind = QMatrix::Kind::Dense;
      m.dtype = DType::BF16;
      m.w = st.s16.data() + elems * size_t(e);
      m.rows = rows;
      m.cols = cols;
      st.src.push_back(m);
    }
  } else {
    const size_t nw = elems * size_t(bits) / 32, ng = elems / size_t(group);
    st.w.resize(nw * size_t(n));
    for (auto& v : st.w) v = uint32_t(rng());
    const float base = bits == 4 ? 0.02f : 0.002f, mid = 0.5f * float((1 << bits) - 1);
    st.s32.resize(ng * size_t(n));
    st.b32.resize(ng * size_t(n));
    for (size_t i = 0; i < ng * size_t(n); ++i) {
      const float s = f16_to_f32(f32_to_f16(base * (0.5f + 0.5f * u(rng))));  // an f16 scale, as the sources keep
      const float z = std::floor(mid + 2.5f * u(rng) + 0.5f);
      st.s32[i] = s;
      st.b32[i] = o == Origin::F32Free ? -mid * s + 0.3f * s * u(rng) : -z * s;
    }
    if (o == Origin::Bf16) {
      st.s16.resize(st.s32.size());
      st.b16.resize(st.b32.size());
      for (size_t i = 0; i < st.s32.size(); ++i) {
        st.s16[i] = f32_to_bf16(st.s32[i]);
        st.b16[i] = f32_to_bf16(st.b32[i]);
      }
    }
    st.ts.resize(st.s32.size());
    st.tb.resize(st.b32.size());
    for (int e = 0; e < n; ++e) {
      QMatrix m;
      m.kind = QMatrix::Kind::Affine;
      m.sdtype = o == Origin::Bf16 ? DType::BF16 : DType::F32;
      m.w = st.w.data() + nw * size_t(e);
      const size_t g0 = ng * size_t(e);
      m.scales = o == Origin::Bf16 ? static_cast<const void*>(st.s16.data() + g0) : st.s32.data() + g0;
      m.biases = o == Origin::Bf16 ? static_cast<const void*>(st.b16.data() + g0) : st.b32.data() + g0;
      m.bits = bits;
      m.group = group;
      m.rows = rows;
      m.cols = cols;
      st.src.push_back(m);
      for (size_t i = 0; i < ng; ++i) {
        const Bf16Pair p = affine_pair_at(m.scales, m.biases, m.sdtype, i);
        st.ts[g0 + i] = bf16_to_f32(p.scale);
        st.tb[g0 + i] = bf16_to_f32(p.bias);
      }
    }
  }
  st.twin = st.src;
  if (bits != 16)
    for (int e = 0; e < n; ++e) {
      const size_t g0 = size_t(rows) * size_t(cols / group) * size_t(e);
      st.twin[size_t(e)].sdtype = DType::F32;
      st.twin[size_t(e)].scales = st.ts.data() + g0;
      st.twin[size_t(e)].biases = st.tb.data() + g0;
    }
  // the upload, as CudaBackend::upload_stack does it
  cuda::DMat m = cuda::describe_matrix(st.src[0], "test matrix");
  if (m.fmt == cuda::kQ4Z)  // the twin holds the scale and bias the kQ4Z word decodes to
    for (size_t i = 0; i < st.ts.size(); ++i) {
      uint32_t word = 0;
      if (!q4z_word(st.s32[i], st.b32[i], &word)) throw Error("make_form: a group not of the kQ4Z form");
      q4z_decode(word, &st.ts[i], &st.tb[i]);
    }
  if (m.fmt == cuda::kQ4H || m.fmt == cuda::kQ8H)  // the fp16 pair
    for (size_t i = 0; i < st.ts.size(); ++i) {
      const uint32_t word = f16_pair_word(st.s32[i], st.b32[i]);
      st.ts[i] = f16_to_f32(uint16_t(word & 0xffffu));
      st.tb[i] = f16_to_f32(uint16_t(word >> 16));
    }
  const size_t wb = cuda::dmat_w_bytes(m), nsb = cuda::dmat_sb_words(m);
  uint8_t* dw = dev.poisoned<uint8_t>(wb * size_t(n));
  uint32_t* dsb = nsb ? dev.poisoned<uint32_t>(nsb * size_t(n)) : nullptr;
  for (int e = 0; e < n; ++e)
    cuda::copy_matrix(st.src[size_t(e)], m, dw + wb * size_t(e), dsb ? dsb + nsb * size_t(e) : nullptr);
  m.w = dw;
  m.sb = dsb;
  st.d.m = m;
  st.d.w_stride = int64_t(wb);
  st.d.sb_stride = int64_t(nsb);
}

}  // namespace lily::testcuda
