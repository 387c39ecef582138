// A warp's dots of whole weight rows against one x (or a verify's rows' x): the per-lane partial dot of a row
// (row_dot_lane), two rows with all their loads in flight (row_dot2_lane), R rows of a warp in flight (RowSet), and
// the L2 prefetch of a row's first bytes. Included at the end of device_util.cuh (chunk loads and dots above it).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/decode/kernels.h"

namespace lily::cuda {

// Partial (per-lane) dot of row `row` of m with x (xs/xsum16 at chunk offset xc0); lanes stride by 32 chunks.
template <int FMT>
__device__ __forceinline__ float row_dot_lane(const DMat& m, int64_t row, const float* xs, const float* xsum16,
                                              int xc0, int lane) {
  constexpr int U = 4;
  const int nch = m.cols / FmtInfo<FMT>::kElems;
  float acc = 0.f;
  for (int c0 = 0; c0 < nch; c0 += 32 * U) {
    uint4 raw[U];
    uint32_t sb[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) chunk_load<FMT>(m, row, c, raw[u], sb[u]);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) acc += chunk_dot<FMT>(raw[u], sb[u], xs, xsum16, xc0 + c);
    }
  }
  return acc;
}

// Two rows at once (all their loads in flight before any math): partial dots of rows r0 of m0 and r1 of m1
// (same format and cols) with x in representation X. r1 < 0: only the first.
template <int FMT, class X>
__device__ __forceinline__ void row_dot2_lane(const DMat& m0, int64_t r0, const DMat& m1, int64_t r1, const X& x,
                                              int lane, float& a0, float& a1) {
  constexpr int U = 2;
  const int nch = m0.cols / FmtInfo<FMT>::kElems;
  a0 = 0.f;
  a1 = 0.f;
  for (int c0 = 0; c0 < nch; c0 += 32 * U) {
    uint4 raw0[U], raw1[U];
    uint32_t sb0[U], sb1[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        chunk_load<FMT>(m0, r0, c, raw0[u], sb0[u]);
        if (r1 >= 0) chunk_load<FMT>(m1, r1, c, raw1[u], sb1[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch) {
        a0 += x.template dot<FMT>(raw0[u], sb0[u], c);
        if (r1 >= 0) a1 += x.template dot<FMT>(raw1[u], sb1[u], c);
      }
    }
  }
}

// R rows of one warp in flight: the 16-byte chunks [c0, c0 + 64) of row rr[i] of matrix *m[i] (rr[i] < 0: none),
// all loads issued before any math (the GEMVs and the lm_head keep the next set's loads in flight during the
// current set's reductions). nch: chunks per row.
template <int FMT, int R>
struct RowSet {
  uint4 raw[R][2];
  uint32_t sb[R][2];
  __device__ __forceinline__ void load(const DMat* const (&m)[R], const int (&rr)[R], int nch, int c0, int lane) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch)
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (rr[i] >= 0) chunk_load<FMT>(*m[i], rr[i], c, raw[i][u], sb[i][u]);
    }
  }
  template <class X>
  __device__ __forceinline__ void dot(const int (&rr)[R], const X& x, int nch, int c0, int lane,
                                      float (&acc)[R]) const {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int c = c0 + lane + 32 * u;
      if (c < nch)
#pragma unroll
        for (int i = 0; i < R; ++i)
          if (rr[i] >= 0) acc[i] += x.template dot<FMT>(raw[i][u], sb[i][u], c);
    }
  }
  // dot() for each of the first n of MR rows' x (a verify's rows): acc[j] as dot(rr, x[j], ...) gives it, the same
  // sums in the same order. 4-bit weights with XQ: each chunk's codes unpacked once for the rows and each row's x
  // chunk read from shared memory once for the R weight rows.
  template <int MR, class X>
  __device__ __forceinline__ void dot_rows(const int (&rr)[R], const X (&x)[MR], int n, int nch, int c0, int lane,
                                           float (&acc)[MR][R]) const {
    if constexpr (std::is_same_v<X, XQ> && fmt_q4(FMT)) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int c = c0 + lane + 32 * u;
        if (c >= nch) continue;
        Q4Codes w[R];
#pragma unroll
        for (int i = 0; i < R; ++i) w[i] = Q4Codes::of<FMT>(raw[i][u], sb[i][u]);
#pragma unroll
        for (int j = 0; j < MR; ++j) {
          if (j >= n) break;  // warp-uniform
          const XqChunk xc = x[j].chunk(c);
#pragma unroll
          for (int i = 0; i < R; ++i)
            if (rr[i] >= 0) acc[j][i] += q4i8_dot(w[i], xc);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < MR; ++j)
        if (j < n) dot(rr, x[j], nch, c0, lane, acc[j]);
    }
  }
};

// Issues L2 prefetches of the first bytes of a row (used before pdl_wait to overlap the launch gap).
__device__ __forceinline__ void prefetch_row(const DMat& m, int64_t row, int lane) {
  const int64_t off = int64_t(lane) * 128;
  if (off < m.row_bytes) prefetch_l2(m.w + row * m.row_bytes + off);
}

}  // namespace lily::cuda
