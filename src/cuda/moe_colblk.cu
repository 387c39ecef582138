// The column-blocked copy of the down matrices for the one-wave MoE (kernels.h DColBlk, moe_one_wave.cuh): made
// once at load on the device, a transpose of each expert's [H][cols / 8] weight words and [H][cols / group]
// (scale, bias) words.
#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace lily::cuda {
namespace {

// dst[e][c][r] = src[e][r][c] for an [R][C] word matrix per expert (e = blockIdx.y)
__global__ void k_transpose_words(const uint32_t* src, int64_t src_stride, uint32_t* dst, int R, int C) {
  const int64_t e = blockIdx.y;
  const uint32_t* s = src + e * src_stride;
  uint32_t* d = dst + e * int64_t(R) * C;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t(R) * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t c = i / R, r = i - c * R;  // consecutive threads: consecutive rows of one column
    d[i] = s[r * C + c];
  }
}

}  // namespace

DColBlk make_colblk(const DStack& s, int E, uint32_t* dw, uint32_t* dsb) {
  const DMat& m = s.m;
  if (m.fmt != kQ4 || m.cols % m.group || m.group % 8 || m.row_bytes != m.cols / 2 || s.w_stride % 4 ||
      (E > 1 && s.w_stride != m.row_bytes * m.rows))
    throw Error("make_colblk: needs 4-bit rows of whole 8-column words stored back to back");
  DColBlk c;
  c.rows = m.rows;
  c.cols = m.cols;
  c.group = m.group;
  c.cb_per_e = m.cols / 8;
  c.g_per_e = m.cols / m.group;
  const dim3 grid(64, unsigned(E));
  k_transpose_words<<<grid, 256>>>(reinterpret_cast<const uint32_t*>(m.w), s.w_stride / 4, dw, m.rows, c.cb_per_e);
  LILY_CUDA_CHECK(cudaGetLastError());
  k_transpose_words<<<grid, 256>>>(m.sb, s.sb_stride, dsb, m.rows, c.g_per_e);
  LILY_CUDA_CHECK(cudaGetLastError());
  LILY_CUDA_CHECK(cudaDeviceSynchronize());
  c.w = dw;
  c.sb = dsb;
  return c;
}

}  // namespace lily::cuda
