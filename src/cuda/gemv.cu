// Row-parallel fused GEMV for decode (batch 1): one warp per output row, 16-byte coalesced weight loads,
// dequantisation in registers (s*Sum(xq) + b*Sum(x)), optional RMSNorm prologue, several matrices sharing one x
// in one launch, optional residual accumulation. Also the embedding-row kernel.
#include "cuda/device_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kThreads = 256;

struct GemvParams {  // passed by value (kernel parameter space)
  GemvSeg seg[kMaxSegs];
  int nseg;
  int total_rows;
  const float* x;
  const float* norm_w;
  float eps;
  int cols;
};

// X: activation representation (XF: f32, any format; XQ: int8 hi+lo with dp4a, 4-bit weights only).
template <int FMT, class X>
__global__ void __launch_bounds__(kThreads, 2) k_gemv(const GemvParams p) {
  extern __shared__ float4 smem4[];
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv(nws + p.cols, p.cols);
  __shared__ float red[32];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);

  // Resolves global row -> (segment, local row); r = -1 past the end.
  auto resolve = [&](int row, int& sgi, int& r) {
    if (row >= p.total_rows) { sgi = 0; r = -1; return; }
    r = row;
    sgi = 0;
    while (sgi + 1 < p.nseg && r >= p.seg[sgi].m.rows) r -= p.seg[sgi++].m.rows;
  };
  const int nch = p.cols / FmtInfo<FMT>::kElems;
  // Weights do not depend on the previous kernel: load this warp's first row pair before waiting on it and
  // before the x prologue, so their latency overlaps both.
  RowPair<FMT> P;
  int row = warp, s0, r0, s1, r1;
  resolve(row, s0, r0);
  resolve(row + nwarps, s1, r1);
  if (r0 >= 0) P.load(p.seg[s0].m, r0, p.seg[s1].m, r1, 0, lane);
  const float* nw = stage_vec(p.norm_w, p.cols, nws);
  pdl_wait();
  load_x(p.x, nw, p.eps, p.cols, xv, red);
  pdl_trigger();

  while (r0 >= 0) {  // two rows per warp in flight, next pair loaded before this pair's reductions
    float a0 = 0.f, a1 = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 64) {
      if (c0 > 0) P.load(p.seg[s0].m, r0, p.seg[s1].m, r1, c0, lane);
      P.dot(p.seg[s0].m, r1, xv, c0, lane, a0, a1);
    }
    const int cs0 = s0, cr0 = r0, cs1 = s1, cr1 = r1;
    row += 2 * nwarps;
    resolve(row, s0, r0);
    resolve(row + nwarps, s1, r1);
    if (r0 >= 0) P.load(p.seg[s0].m, r0, p.seg[s1].m, r1, 0, lane);
    a0 = warp_sum(a0);
    a1 = warp_sum(a1);
    if (lane == 0) {
      const GemvSeg& g0 = p.seg[cs0];
      g0.y[cr0] = g0.accumulate ? g0.y[cr0] + a0 : a0;
      if (cr1 >= 0) {
        const GemvSeg& g1 = p.seg[cs1];
        g1.y[cr1] = g1.accumulate ? g1.y[cr1] + a1 : a1;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads) k_embed(const DMat E, const int32_t* in_ids, const StepCtl* ctl,
                                                    float* x) {
  pdl_wait();
  pdl_trigger();
  const int64_t id = in_ids[ctl->cursor];
  for (int i = threadIdx.x; i < E.cols; i += blockDim.x) {
    float v;
    if (E.fmt == kBF16) {
      v = bf2f(reinterpret_cast<const uint16_t*>(E.w + id * E.row_bytes)[i]);
    } else {
      const uint32_t* wr = reinterpret_cast<const uint32_t*>(E.w + id * E.row_bytes);
      const int per = 32 / E.fmt;
      const uint32_t q = (wr[i / per] >> ((i % per) * E.fmt)) & ((1u << E.fmt) - 1u);
      const uint32_t sb = E.sb[id * E.sb_row + i / E.group];
      v = bf_lo(sb) * float(q) + bf_hi(sb);
    }
    x[i] = v;
  }
}

bool g_int8_x = true;

}  // namespace

void set_decode_int8_x(bool on) { g_int8_x = on; }
bool decode_int8_x() { return g_int8_x; }
bool use_int8_x(int fmt, int cols) { return g_int8_x && fmt == kQ4 && cols % 32 == 0 && cols <= 32 * 256; }

size_t gemv_smem_bytes(int cols) { return size_t(cols) * 8 + size_t(cols / 16) * 4; }  // x, staged norm_w, sums

void gemv(const GemvSeg* segs, int nseg, const float* x, const float* norm_w, float eps, cudaStream_t s,
          bool pdl) {
  if (nseg < 1 || nseg > kMaxSegs) throw Error("gemv: bad segment count");
  GemvParams p = {};
  p.nseg = nseg;
  p.x = x;
  p.norm_w = norm_w;
  p.eps = eps;
  p.cols = segs[0].m.cols;
  for (int i = 0; i < nseg; ++i) {
    if (segs[i].m.fmt != segs[0].m.fmt || segs[i].m.cols != p.cols)
      throw Error("gemv: segments differ in format or cols");
    p.seg[i] = segs[i];
    p.total_rows += segs[i].m.rows;
  }
  if (p.cols % 32 != 0) throw Error("gemv: cols must be a multiple of 32");
  const int wpb = kThreads / 32;
  const size_t smem = gemv_smem_bytes(p.cols);
  auto run = [&](auto kern) {
    allow_smem(kern, smem);
    const int blocks = std::min((p.total_rows + wpb - 1) / wpb, resident_grid(kern, kThreads, smem));
    launch(kern, dim3(blocks), dim3(kThreads), smem, s, pdl, p);
  };
  switch (segs[0].m.fmt) {
    case kQ4:
      if (use_int8_x(kQ4, p.cols)) run(k_gemv<kQ4, XQ>);
      else run(k_gemv<kQ4, XF>);
      break;
    case kQ8: run(k_gemv<kQ8, XF>); break;
    case kBF16: run(k_gemv<kBF16, XF>); break;
    default: throw Error("gemv: unknown format");
  }
}

void embed(const DMat& E, const int32_t* in_ids, const StepCtl* ctl, float* x, cudaStream_t s, bool pdl) {
  launch(k_embed, dim3(1), dim3(kThreads), 0, s, pdl, E, in_ids, ctl, x);
}

}  // namespace lily::cuda
