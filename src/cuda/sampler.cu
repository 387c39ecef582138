// Greedy sampling on the GPU: the lm_head GEMV (final RMSNorm prologue, one warp per vocab row) writes the logits
// and folds a running argmax into one 64-bit atomicMax (ordered logit << 32 | ~id, so ties pick the lower id).
// The last block to finish writes the id to out_ids[cursor], feeds it to the next step's input, advances the
// step (cursor, pos) and resets the accumulators: the whole step can be replayed from a CUDA graph.
#include <cfloat>

#include "cuda/device_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ unsigned long long pack_best(float v, int id) {
  uint32_t u = __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // monotone float -> uint
  return (static_cast<unsigned long long>(u) << 32) | static_cast<uint32_t>(~static_cast<uint32_t>(id));
}

template <int FMT>
__global__ void __launch_bounds__(kThreads, 2) k_lm_head(const DMat W, const float* x, const float* norm_w, float eps,
                                                      float* logits, int32_t* in_ids, int32_t* out_ids,
                                                      StepCtl* ctl) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  float* nws = xs + W.cols;  // norm_w staged here before pdl_wait
  float* xsum16 = nws + W.cols;
  __shared__ float red[32];
  __shared__ unsigned long long wbest[kThreads / 32];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const int warp = blockIdx.x * (kThreads / 32) + wib;
  const int nwarps = gridDim.x * (kThreads / 32);
  const int nch = W.cols / FmtInfo<FMT>::kElems;
  RowPair<FMT> P;
  int row = warp;
  int row1 = row + nwarps < W.rows ? row + nwarps : -1;
  if (row < W.rows) P.load(W, row, W, row1, 0, lane);
  const float* nw = stage_vec(norm_w, W.cols, nws);
  pdl_wait();
  load_x(x, nw, eps, W.cols, xs, xsum16, red);
  pdl_trigger();
  float bv = -FLT_MAX;
  int bi = 0;
  while (row < W.rows) {  // two rows in flight, next pair loaded before the reductions; rows ascend per warp
    float v0 = 0.f, v1 = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 64) {
      if (c0 > 0) P.load(W, row, W, row1, c0, lane);
      P.dot(W, row1, xs, xsum16, c0, lane, v0, v1);
    }
    const int cr0 = row, cr1 = row1;
    row += 2 * nwarps;
    row1 = row + nwarps < W.rows ? row + nwarps : -1;
    if (row < W.rows) P.load(W, row, W, row1, 0, lane);
    v0 = warp_sum(v0);
    v1 = warp_sum(v1);
    if (lane == 0) {
      logits[cr0] = v0;
      if (cr1 >= 0) logits[cr1] = v1;
    }
    if (v0 > bv) { bv = v0; bi = cr0; }  // strict > keeps the lowest id on ties
    if (cr1 >= 0 && v1 > bv) { bv = v1; bi = cr1; }
  }
  if (lane == 0) wbest[wib] = pack_best(bv, bi);
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long b = 0;
    for (int w = 0; w < kThreads / 32; ++w) b = max(b, wbest[w]);
    atomicMax(&ctl->best, b);
    __threadfence();
    s_last = atomicAdd(&ctl->lm_done, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (s_last && threadIdx.x == 0) {
    __threadfence();
    const unsigned long long b = atomicAdd(&ctl->best, 0ull);
    const int id = static_cast<int>(~static_cast<uint32_t>(b & 0xffffffffu));
    const int cur = ctl->cursor;
    out_ids[cur] = id;
    if (cur + 1 >= ctl->n_given) in_ids[cur + 1] = id;
    ctl->cursor = cur + 1;
    ctl->pos = ctl->pos + 1;
    ctl->best = 0;
    ctl->lm_done = 0;
  }
}

int num_sms() {
  static int n = [] {
    int dev = 0, v = 0;
    LILY_CUDA_CHECK(cudaGetDevice(&dev));
    LILY_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

}  // namespace

void lm_head_argmax(const DMat& W, const float* x, const float* norm_w, float eps, float* logits, int32_t* in_ids,
                    int32_t* out_ids, StepCtl* ctl, cudaStream_t s, bool pdl) {
  const int blocks = std::min((W.rows + 7) / 8, num_sms() * 3);
  const size_t smem = size_t(W.cols) * 8 + size_t(W.cols / 16) * 4;
  auto run = [&](auto kern) {
    static bool once = [&] {
      LILY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
      return true;
    }();
    (void)once;
    launch(kern, dim3(blocks), dim3(kThreads), smem, s, pdl, W, x, norm_w, eps, logits, in_ids, out_ids, ctl);
  };
  switch (W.fmt) {
    case kQ4: run(k_lm_head<kQ4>); break;
    case kQ8: run(k_lm_head<kQ8>); break;
    default: run(k_lm_head<kBF16>); break;
  }
}

}  // namespace lily::cuda
