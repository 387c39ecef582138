// x-load probe (not part of the build): how long does a decode kernel's first dependent read (its 8 KB input x,
// just written by the previous kernel, so an L2 hit) take after griddepcontrol.wait, when the block's warps have
// issued their weight rows before the wait (as the GEMVs do), and does a TMA bulk copy (cp.async.bulk, its own
// queue) land sooner than plain loads? A graph of 240 GEMV-like kernels (PDL chain, 2 blocks x 256 threads per SM,
// dependents signalled at entry), each warp with R rows of 1 KB (cold, scattered slices of an 18 GB buffer) loaded
// into registers before the wait, 1 row per warp more after it. Prints us per kernel and the wait -> x-in-shared
// time (mean over blocks and kernels, and the mean of each kernel's slowest block).
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/p tools/xload_probe.cu && /tmp/p
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>

constexpr int kX = kProbeX;


// stats: [0] sum of (x landed - wait) over blocks in ns, [1] sum over kernels of the slowest block's, [2] blocks
template <int R>
__global__ void __launch_bounds__(256, 2) k_gemv(const float* xin, float* xout, const uint8_t* w, int tma,
                                                unsigned long long* stats, unsigned long long* kmax) {
  __shared__ __align__(16) float xs[kX];
  __shared__ __align__(8) unsigned long long bar;
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  const unsigned sbar = static_cast<unsigned>(__cvta_generic_to_shared(&bar));
  if (tma && threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(sbar));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  uint4 v[R > 0 ? R : 1][2];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int u = 0; u < 2; ++u) v[r][u] = ldg_stream(w + ((warp + r * nw) * 1024) + (lane + 32 * u) * 16);
  __syncthreads();  // the barrier's init visible
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const unsigned long long t0 = now_ns();
  if (tma) {
    if (threadIdx.x == 0) {
      const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(xs));
      asm volatile("mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;" ::"r"(sbar), "r"(kX * 4) : "memory");
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                   ::"r"(dst), "l"(xin), "r"(kX * 4), "r"(sbar) : "memory");
    }
    uint32_t done = 0;
    while (!done)
      asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                   : "=r"(done) : "r"(sbar) : "memory");
  } else {
    const float4* xp = reinterpret_cast<const float4*>(xin);
    float4 a = xp[threadIdx.x], b = xp[threadIdx.x + 256];
    reinterpret_cast<float4*>(xs)[threadIdx.x] = a;
    reinterpret_cast<float4*>(xs)[threadIdx.x + 256] = b;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long d = now_ns() - t0;
    atomicAdd(stats, d);
    atomicAdd(stats + 2, 1ull);
    atomicMax(kmax, d);
  }
  probe_rows_tail<R>(v, xs, w, warp, nw, xout);
}

int main() {
  ProbeSetup p = probe_setup();
  float* xv = nullptr;
  CK(cudaMalloc(&xv, 2 * kX * 4));
  CK(cudaMemset(xv, 0, 2 * kX * 4));
  unsigned long long* st = nullptr;  // [3] + per-kernel max [240]
  CK(cudaMalloc(&st, (3 + kProbeKernels) * 8));
  const int N = kProbeKernels, Rp = kProbeReps;
  for (int R : {0, 1, 2, 4})
    for (int tma = 0; tma < 2; ++tma) {
      auto kern = R == 0 ? k_gemv<0> : R == 1 ? k_gemv<1> : R == 2 ? k_gemv<2> : k_gemv<4>;
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(p.s, cudaStreamCaptureModeRelaxed));
      for (int i = 0; i < N; ++i)
        probe_launch(kern, p.grid, 0, p.s, true, (const float*)(xv + (i & 1) * kX), xv + ((i + 1) & 1) * kX,
                   (const uint8_t*)(p.buf + scattered_slice(i, N)), tma, st, st + 3 + i);
      CK(cudaStreamEndCapture(p.s, &g));
      CK(cudaMemset(st, 0, (3 + N) * 8));
      const double ms = time_graph_ms(g, p.s, 3, Rp);
      unsigned long long h[3 + kProbeKernels];
      CK(cudaMemcpy(h, st, sizeof(h), cudaMemcpyDeviceToHost));
      double kmax = 0;
      for (int i = 0; i < N; ++i) kmax += double(h[3 + i]);
      std::printf("R=%d (%2d KB/SM before the wait) %s: %6.2f us/kernel  wait->x %5.2f us mean, slowest block %5.2f us "
                  "(max over launches)\n",
                  R, R * 16, tma ? "tma  " : "plain", 1e3 * ms / N, double(h[0]) / double(h[2]) / 1e3, kmax / N / 1e3);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
