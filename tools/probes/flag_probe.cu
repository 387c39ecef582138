// Flag probe (not part of the build): does a consumer kernel that polls per-block flags of its producer (each
// producer block stores its flag with release semantics after its outputs; each consumer thread acquires one or two
// flags, then a block barrier) get its input sooner than griddepcontrol.wait, which returns after the whole producer
// grid has exited and its memory is flushed? A graph of 240 GEMV-like kernels (2 blocks x 256 threads per SM, held
// to 2 per SM by 96 KB of shared memory as the decode kernels' registers do, dependents signalled at entry), each
// warp with R rows of 1 KB loaded before the wait and one more after it, each kernel reading the previous one's 8 KB
// output. Prints us per kernel for: PDL wait (mode 0), flags without griddepcontrol.wait (mode 1).
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/p tools/probes/flag_probe.cu && /tmp/p
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>

constexpr int kX = kProbeX, kMaxBlocks = 512;
constexpr size_t kSmem = 96 << 10;

__device__ unsigned g_epoch;

__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__global__ void k_epoch() { ++g_epoch; }

// flags_in: the producer's per-block flags (null: the first kernel of the chain); flags_out: this kernel's
template <int R>
__global__ void __launch_bounds__(256, 2) k_gemv(const float* xin, float* xout, const uint8_t* w, int mode,
                                                const unsigned* flags_in, unsigned* flags_out,
                                                unsigned long long* stats) {
  extern __shared__ float4 smem4[];
  float* xs = reinterpret_cast<float*>(smem4);
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const unsigned epoch = *(volatile unsigned*)&g_epoch;
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  uint4 v[R > 0 ? R : 1][2];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int u = 0; u < 2; ++u) v[r][u] = ldg_stream(w + ((warp + r * nw) * 1024) + (lane + 32 * u) * 16);
  if (mode == 0 || !flags_in) {
    asm volatile("griddepcontrol.wait;" ::: "memory");
  } else {
    for (int b = threadIdx.x; b < int(gridDim.x); b += blockDim.x)
      while (probe_ld_acquire(flags_in + b) < epoch) {
      }
    __syncthreads();
  }
  const unsigned long long t0 = now_ns();
  const float4* xp = reinterpret_cast<const float4*>(xin);
  float4 a = __ldcg(xp + threadIdx.x), b = __ldcg(xp + threadIdx.x + 256);
  reinterpret_cast<float4*>(xs)[threadIdx.x] = a;
  reinterpret_cast<float4*>(xs)[threadIdx.x + 256] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(stats, now_ns() - t0);
    atomicAdd(stats + 1, 1ull);
  }
  probe_rows_tail<R>(v, xs, w, warp, nw, xout);
  if (mode == 1) {
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      st_release(flags_out + blockIdx.x, epoch);
    }
  }
}

int main() {
  ProbeSetup p = probe_setup();
  if (p.grid > kMaxBlocks) { std::printf("too many SMs\n"); return 1; }
  float* xv = nullptr;
  CK(cudaMalloc(&xv, 2 * kX * 4));
  CK(cudaMemset(xv, 0, 2 * kX * 4));
  unsigned long long* st = nullptr;
  CK(cudaMalloc(&st, 16));
  unsigned* flags = nullptr;
  const int N = kProbeKernels, Rp = kProbeReps;
  CK(cudaMalloc(&flags, size_t(N) * kMaxBlocks * 4));
  CK(cudaMemset(flags, 0, size_t(N) * kMaxBlocks * 4));
  for (int R : {0, 2, 4, 6})
    for (int mode = 0; mode < 2; ++mode) {
      auto kern = R == 0 ? k_gemv<0> : R == 2 ? k_gemv<2> : R == 4 ? k_gemv<4> : k_gemv<6>;
      CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmem)));
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(p.s, cudaStreamCaptureModeRelaxed));
      k_epoch<<<1, 1, 0, p.s>>>();
      for (int i = 0; i < N; ++i)
        probe_launch(kern, p.grid, kSmem, p.s, i > 0, (const float*)(xv + (i & 1) * kX), xv + ((i + 1) & 1) * kX,
                     (const uint8_t*)(p.buf + scattered_slice(i, N)), mode,
                     (const unsigned*)(i > 0 ? flags + size_t(i - 1) * kMaxBlocks : nullptr),
                     flags + size_t(i) * kMaxBlocks, st);
      CK(cudaStreamEndCapture(p.s, &g));
      CK(cudaMemset(st, 0, 16));
      const double ms = time_graph_ms(g, p.s, 3, Rp);
      unsigned long long h[2];
      CK(cudaMemcpy(h, st, sizeof(h), cudaMemcpyDeviceToHost));
      std::printf("R=%d (%2d KB/SM before the wait) %s: %6.2f us/kernel  wait->x %5.2f us mean\n", R, R * 16,
                  mode ? "flags" : "pdl  ", 1e3 * ms / N, double(h[0]) / double(h[1]) / 1e3);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
