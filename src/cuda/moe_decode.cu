// MoE decode kernels (batch 1):
//  k_moe_router: router logits[E] and the shared-expert gate logit (one warp per row, all of a row's loads in
//    flight at once); the last block to finish does the top-k routing once (one parallel rank pass over the block)
//    and writes route_idx/route_w. (Measured: the same top-k redone in every gate_up block cost 9 us per layer.)
//  k_moe_gate_up: reads the routing, normalises x (post-attention RMSNorm), then one warp per intermediate row
//    computes gate and up of a selected expert (or the shared one) and writes silu(g)*u.
//  k_moe_down: one warp per hidden row sums, over the k experts and the shared expert, routing weight x
//    (down row . act), and adds it into the residual.
#include <cfloat>

#include "cuda/device_util.cuh"

namespace lily::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxE = 512, kMaxK = 16;

// Top-k over the logits sl[E] (shared, 16-byte aligned, visible to the block) by the whole block in one parallel
// pass: each logit's rank is the number of logits above it (ties -> lower index first), and the k with rank < k land
// in their slots. Weights = softmax over the selected logits (equal to softmax-then-renormalise); results in
// idx[k], w[k] (shared), visible to the block on return.
__device__ void route_block(const float* sl, int E, int k, int* idx, float* w) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    const float v = sl[e];
    int rank = 0;
    int j = 0;
    for (; j + 4 <= E; j += 4) {
      const float4 o = *reinterpret_cast<const float4*>(sl + j);
      rank += (o.x > v || (o.x == v && j < e)) + (o.y > v || (o.y == v && j + 1 < e)) +
              (o.z > v || (o.z == v && j + 2 < e)) + (o.w > v || (o.w == v && j + 3 < e));
    }
    for (; j < E; ++j) rank += sl[j] > v || (sl[j] == v && j < e);
    if (rank < k) {
      idx[rank] = e;
      w[rank] = v;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const float top = w[0];
    float sum = 0.f;
    for (int j = 0; j < k; ++j) {
      w[j] = __expf(w[j] - top);
      sum += w[j];
    }
    for (int j = 0; j < k; ++j) w[j] /= sum;
  }
  __syncthreads();
}

__device__ __forceinline__ DMat expert(const DStack& st, int e) {
  DMat m = st.m;
  m.w += e * st.w_stride;
  m.sb += e * st.sb_stride;
  return m;
}

constexpr int kRouterThreads = 128;

template <int FMT>
__global__ void __launch_bounds__(kRouterThreads) k_moe_router(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int H = a.router.cols;
  float* xs = reinterpret_cast<float*>(smem4);
  float* nws = xs + H;  // norm_w staged here before pdl_wait
  float* xsum16 = nws + H;
  __shared__ float red[32];
  __shared__ int s_idx[kMaxK];
  __shared__ float s_w[kMaxK];
  __shared__ __align__(16) float s_logits[kMaxE];
  __shared__ int s_last;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (kRouterThreads / 32) + (threadIdx.x >> 5);
  const int rows = a.E + 1;  // the shared-expert gate is row E
  // The router rows and norm_w do not depend on the previous kernel: their loads are issued before pdl_wait.
  const bool sh = row == a.E;
  const DMat& m = sh ? a.shg_w : a.router;
  const int mrow = sh ? 0 : row;
  const int nch = H / FmtInfo<FMT>::kElems;
  RowPair<FMT> P;
  if (row < rows) P.load(m, mrow, m, -1, 0, lane);
  const float* nw = stage_vec(a.norm_w, H, nws);
  pdl_wait();
  load_x(a.x, nw, a.eps, H, xs, xsum16, red);
  pdl_trigger();
  if (row < rows) {
    float v = 0.f, unused = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 64) {
      if (c0 > 0) P.load(m, mrow, m, -1, c0, lane);
      P.dot(m, -1, xs, xsum16, c0, lane, v, unused);
    }
    v = warp_sum(v);
    if (lane == 0) {
      if (sh) a.shg[0] = v;
      else a.logits[row] = v;
    }
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) s_last = atomicAdd(a.route_done, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!s_last) return;  // uniform over the block
  __threadfence();
  for (int e = threadIdx.x; e < a.E; e += blockDim.x) s_logits[e] = __ldcg(a.logits + e);  // other blocks' rows
  __syncthreads();
  route_block(s_logits, a.E, a.k, s_idx, s_w);
  if (threadIdx.x < a.k) {
    a.route_idx[threadIdx.x] = s_idx[threadIdx.x];
    a.route_w[threadIdx.x] = s_w[threadIdx.x];
  }
  if (threadIdx.x == 0) *a.route_done = 0;
}

template <int FMT, class X>
__global__ void __launch_bounds__(kThreads, 2) k_moe_gate_up(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int H = a.gate.m.cols, I = a.gate.m.rows, Is = a.sh_gate.rows;
  float* nws = reinterpret_cast<float*>(smem4);  // norm_w staged here before pdl_wait
  X xv(nws + H, H);
  __shared__ float red[32];
  __shared__ int s_idx[kMaxK];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);
  const int rows = a.k * I + Is;

  const float* nw = stage_vec(a.norm_w, H, nws);
  pdl_wait();
  if (threadIdx.x < a.k) s_idx[threadIdx.x] = a.route_idx[threadIdx.x];
  load_x(a.x, nw, a.eps, H, xv, red);  // ends with __syncthreads (s_idx visible)
  pdl_trigger();
  for (int row = warp; row < rows; row += nwarps) {
    DMat g, u;
    int r;
    if (row < a.k * I) {
      const int e = s_idx[row / I];
      r = row % I;
      g = expert(a.gate, e);
      u = expert(a.up, e);
    } else {
      r = row - a.k * I;
      g = a.sh_gate;
      u = a.sh_up;
    }
    float gv, uv;
    row_dot2_lane<FMT>(g, r, u, r, xv, lane, gv, uv);
    gv = warp_sum(gv);
    uv = warp_sum(uv);
    if (lane == 0) a.act[row] = silu_f(gv) * uv;
  }
}

template <int FMT, class X>
__global__ void __launch_bounds__(kThreads) k_moe_down(const MoeArgs a) {
  extern __shared__ float4 smem4[];
  const int I = a.down.m.cols, Is = a.sh_down.cols, H = a.down.m.rows;
  const int n = a.k * I + Is;
  X xv(smem4, n);
  __shared__ float red[32];
  __shared__ float s_w[kMaxK + 1];
  __shared__ DMat s_m[kMaxK + 1];
  const int lane = threadIdx.x & 31;
  const int warp = blockIdx.x * (kThreads / 32) + (threadIdx.x >> 5);
  const int nwarps = gridDim.x * (kThreads / 32);
  constexpr int E = FmtInfo<FMT>::kElems;
  const int cpr = I / E, cprs = Is / E;  // chunks per row: routed, shared

  pdl_wait();
  if (threadIdx.x < a.k) {
    s_w[threadIdx.x] = a.route_w[threadIdx.x];
    s_m[threadIdx.x] = expert(a.down, a.route_idx[threadIdx.x]);
  } else if (threadIdx.x == a.k) {
    s_w[a.k] = sigmoid_f(a.shg[0]);
    s_m[a.k] = a.sh_down;
  }
  load_x(a.act, nullptr, 0.f, n, xv, red);
  pdl_trigger();
  const int nch = a.k * cpr + cprs;
  constexpr int U = 5;  // chunks per lane in flight (144 chunks per row for k=8, I=Is=512 at 4 bits)
  for (int row = warp; row < H; row += nwarps) {
    float acc = 0.f;
    for (int c0 = 0; c0 < nch; c0 += 32 * U) {
      uint4 raw[U];
      uint32_t sb[U];
      int ee[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int c = c0 + lane + 32 * u;
        ee[u] = -1;
        if (c < nch) {
          int e, cc;
          if (c < a.k * cpr) { e = c / cpr; cc = c - e * cpr; } else { e = a.k; cc = c - a.k * cpr; }
          chunk_load<FMT>(s_m[e], row, cc, raw[u], sb[u]);
          ee[u] = e;
        }
      }
#pragma unroll
      for (int u = 0; u < U; ++u)
        if (ee[u] >= 0) acc += s_w[ee[u]] * xv.template dot<FMT>(raw[u], sb[u], c0 + lane + 32 * u);
    }
    acc = warp_sum(acc);
    if (lane == 0) a.out[row] += acc;
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

template <typename K>
void set_smem(K kern) {
  LILY_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024));
}

void check(const MoeArgs& a) {
  const int f = a.gate.m.fmt;
  if (a.up.m.fmt != f || a.down.m.fmt != f || a.sh_gate.fmt != f || a.sh_up.fmt != f || a.sh_down.fmt != f)
    throw Error("moe: experts and shared expert must share one weight format");
  if (a.E > kMaxE || a.k > kMaxK || a.k < 1) throw Error("moe: unsupported expert count / top-k");
  const int E = f == kQ4 ? 32 : f == kQ8 ? 16 : 8;
  if (a.down.m.cols % 32 || a.sh_down.cols % 32 || a.gate.m.cols % 32 || a.down.m.cols % E)
    throw Error("moe: sizes must be multiples of 32");
}

}  // namespace

void moe_router(const MoeArgs& a, cudaStream_t s, bool pdl) {
  if (a.E > kMaxE || a.k > kMaxK || a.k < 1) throw Error("moe: unsupported expert count / top-k");
  if (a.router.fmt != a.shg_w.fmt || a.router.cols != a.shg_w.cols || a.router.rows != a.E || a.shg_w.rows != 1)
    throw Error("moe_router: router and shared gate must share format and cols");
  const int blocks = (a.E + 1 + kRouterThreads / 32 - 1) / (kRouterThreads / 32);
  const size_t smem = size_t(a.router.cols) * 8 + size_t(a.router.cols / 16) * 4;
  auto run = [&](auto kern) {
    static bool once = (set_smem(kern), true);
    (void)once;
    launch(kern, dim3(blocks), dim3(kRouterThreads), smem, s, pdl, a);
  };
  switch (a.router.fmt) {
    case kQ4: run(k_moe_router<kQ4>); break;
    case kQ8: run(k_moe_router<kQ8>); break;
    default: run(k_moe_router<kBF16>); break;
  }
}

void moe_gate_up(const MoeArgs& a, cudaStream_t s, bool pdl) {
  check(a);
  const int rows = a.k * a.gate.m.rows + a.sh_gate.rows;
  const int blocks = std::min((rows + 7) / 8, num_sms() * 4);
  const size_t smem = size_t(a.gate.m.cols) * 8 + size_t(a.gate.m.cols / 16) * 4;
  auto run = [&](auto kern) {
    static bool once = (set_smem(kern), true);
    (void)once;
    launch(kern, dim3(blocks), dim3(kThreads), smem, s, pdl, a);
  };
  switch (a.gate.m.fmt) {
    case kQ4:
      if (use_int8_x(kQ4, a.gate.m.cols)) run(k_moe_gate_up<kQ4, XQ>);
      else run(k_moe_gate_up<kQ4, XF>);
      break;
    case kQ8: run(k_moe_gate_up<kQ8, XF>); break;
    default: run(k_moe_gate_up<kBF16, XF>); break;
  }
}

void moe_down(const MoeArgs& a, cudaStream_t s, bool pdl) {
  check(a);
  const int n = a.k * a.down.m.cols + a.sh_down.cols;
  const int H = a.down.m.rows;
  const int blocks = std::min((H + 7) / 8, num_sms() * 4);
  const size_t smem = size_t(n) * 4 + size_t(n / 16) * 4;
  auto run = [&](auto kern) {
    static bool once = (set_smem(kern), true);
    (void)once;
    launch(kern, dim3(blocks), dim3(kThreads), smem, s, pdl, a);
  };
  switch (a.down.m.fmt) {
    case kQ4:
      if (use_int8_x(kQ4, n)) run(k_moe_down<kQ4, XQ>);
      else run(k_moe_down<kQ4, XF>);
      break;
    case kQ8: run(k_moe_down<kQ8, XF>); break;
    default: run(k_moe_down<kBF16, XF>); break;
  }
}

}  // namespace lily::cuda
