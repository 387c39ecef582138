// Random matrices for the CUDA kernel tests in the two checkpoint formats the device keeps as codes with f32 scales
// and no bias (kernels.h kF8 / kQ6): FP8 e4m3 with 128x128 block scales (f32 or bf16, as the FP8 releases store them;
// every code but the NaNs, subnormals included) and GGUF Q6_K blocks (quantised from Gaussian values). Uploaded
// through the backend's own path (describe_matrix / copy_matrix); the host QMatrix views are the exact reference
// (the device forms lose nothing).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cuda/weight_upload.h"
#include "cuda_test_buffers.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "model/weights.h"

namespace lily::testcuda {

enum class Code8 { Fp8F32, Fp8Bf16, Q6K };
inline const char* code8_name(Code8 k) { return k == Code8::Fp8F32 ? "fp8_f32" : k == Code8::Fp8Bf16 ? "fp8_bf16" : "q6k"; }

// n matrices [rows, cols] of one form stored back to back (host views in src, one device stack in d).
struct Code8Stack {
  std::vector<uint8_t> w;
  std::vector<float> s32;
  std::vector<uint16_t> s16;
  std::vector<QMatrix> src;
  cuda::DStack d;
};

inline void make_code8(Code8Stack& st, int n, int rows, int cols, Code8 kind, std::mt19937& rng, Dev& dev) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t elems = size_t(rows) * size_t(cols);
  size_t wb = 0, nsc = 0;
  if (kind == Code8::Q6K) {
    std::normal_distribution<float> g(0.f, 0.02f);
    std::vector<float> x(elems);
    for (int e = 0; e < n; ++e) {
      for (auto& v : x) v = g(rng);
      const std::vector<uint8_t> b = gguf_quantize(GgmlType::Q6_K, x.data(), int64_t(elems));
      wb = b.size();
      st.w.insert(st.w.end(), b.begin(), b.end());
    }
  } else {
    wb = elems;
    st.w.resize(wb * size_t(n));
    for (auto& v : st.w) {
      uint8_t b = uint8_t(rng());
      if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
      v = b;
    }
    nsc = size_t((rows + 127) / 128) * size_t((cols + 127) / 128);
    st.s32.resize(nsc * size_t(n));
    for (auto& s : st.s32) s = 1e-4f * (1.f + 0.5f * u(rng));  // |w| up to 448 s
    if (kind == Code8::Fp8Bf16) {
      st.s16.resize(st.s32.size());
      for (size_t i = 0; i < st.s32.size(); ++i) st.s16[i] = f32_to_bf16(st.s32[i]);
    }
  }
  for (int e = 0; e < n; ++e) {
    QMatrix m;
    m.rows = rows;
    m.cols = cols;
    m.w = st.w.data() + wb * size_t(e);
    if (kind == Code8::Q6K) {
      m.kind = QMatrix::Kind::Ggml;
      m.gtype = uint32_t(GgmlType::Q6_K);
    } else {
      m.kind = QMatrix::Kind::Fp8Block;
      m.dtype = DType::F8_E4M3;
      m.group = 128;
      m.sdtype = kind == Code8::Fp8Bf16 ? DType::BF16 : DType::F32;
      m.scales = kind == Code8::Fp8Bf16 ? static_cast<const void*>(st.s16.data() + nsc * size_t(e))
                                        : st.s32.data() + nsc * size_t(e);
    }
    st.src.push_back(m);
  }
  // the upload, as CudaBackend::upload_stack does it
  cuda::DMat m = cuda::describe_matrix(st.src[0], "test matrix");
  const size_t dwb = cuda::dmat_w_bytes(m), nsb = cuda::dmat_sb_words(m);
  uint8_t* dw = dev.poisoned<uint8_t>(dwb * size_t(n));
  uint32_t* dsb = dev.poisoned<uint32_t>(nsb * size_t(n));
  for (int e = 0; e < n; ++e) cuda::copy_matrix(st.src[size_t(e)], m, dw + dwb * size_t(e), dsb + nsb * size_t(e));
  m.w = dw;
  m.sb = dsb;
  st.d.m = m;
  st.d.w_stride = int64_t(dwb);
  st.d.sb_stride = int64_t(nsb);
}

}  // namespace lily::testcuda
