// Random affine (MLX-style) weight stacks for the CUDA kernel tests: host QMatrix views and one device DStack.
#pragma once
#include <cstdint>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "cuda/decode/kernels.h"
#include "cuda_test_buffers.h"
#include "model/weights.h"

namespace lily::testcuda {

// n matrices [rows, cols] of affine `bits` / `group` (default 64) stored back to back (host QMatrix views + one device
// stack).
struct AffStack {
  std::vector<uint32_t> w;
  std::vector<uint16_t> s, b;
  std::vector<QMatrix> q;
  cuda::DStack d;
};

inline void make_stack(AffStack& st, int n, int rows, int cols, int bits, std::mt19937& rng, Dev& dev,
                       int group = 64) {
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  const size_t nw = size_t(rows) * cols * bits / 32, ng = size_t(rows) * cols / group;
  st.w.resize(nw * n);
  for (auto& v : st.w) v = uint32_t(rng());
  st.s.resize(ng * n);
  st.b.resize(ng * n);
  std::vector<uint32_t> sb(ng * n);
  const float sc = bits == 4 ? 0.02f : 0.002f;
  for (size_t i = 0; i < ng * n; ++i) {
    st.s[i] = f32_to_bf16(sc * (0.5f + 0.5f * u(rng)));
    st.b[i] = f32_to_bf16(-0.5f * sc * float((1 << bits) - 1) + 0.01f * u(rng));
    sb[i] = uint32_t(st.s[i]) | (uint32_t(st.b[i]) << 16);
  }
  for (int e = 0; e < n; ++e) {
    QMatrix m;
    m.kind = QMatrix::Kind::Affine;
    m.sdtype = DType::BF16;
    m.w = st.w.data() + nw * e;
    m.scales = st.s.data() + ng * e;
    m.biases = st.b.data() + ng * e;
    m.bits = bits;
    m.group = group;
    m.rows = rows;
    m.cols = cols;
    st.q.push_back(m);
  }
  cuda::DMat& d = st.d.m;
  d.w = reinterpret_cast<const uint8_t*>(dev.up(st.w));
  d.sb = dev.up(sb);
  d.fmt = bits;
  d.rows = rows;
  d.cols = cols;
  cuda::dmat_set_group(d, group);
  d.row_bytes = int64_t(cols) * bits / 8;
  d.sb_row = cols / group;
  st.d.w_stride = int64_t(nw) * 4;
  st.d.sb_stride = int64_t(ng);
}

}  // namespace lily::testcuda
