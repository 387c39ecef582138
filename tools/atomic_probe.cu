// Atomic drain probe (not part of the build): what do the router epilogue's block sums cost? A graph of N kernels
// (PDL chain, 256 blocks x 256 threads, each kernel waits for the previous one), every thread adding one value into
// acc[t * stride] (u64 integer atomics, f32 atomics, or plain stores as the baseline), so 65,536 atomics on 256
// addresses per kernel, as 256 out-projection blocks add their 256 logits. Prints us per kernel.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/p tools/atomic_probe.cu && /tmp/p
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>

// mode 0: plain store (block 0 only), 1: u64 atomicAdd, 2: f32 atomicAdd
__global__ void __launch_bounds__(256) k_atomic(unsigned long long* acc, int stride, int mode) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int t = threadIdx.x;
  const float v = 1e-3f * float(t + blockIdx.x);
  if (mode == 0) {
    if (blockIdx.x == 0) acc[t * stride] = static_cast<unsigned long long>(v * 4294967296.0);
  } else if (mode == 1) {
    atomicAdd(acc + t * stride, static_cast<unsigned long long>(__double2ll_rn(double(v) * 4294967296.0)));
  } else {
    atomicAdd(reinterpret_cast<float*>(acc + t * stride), v);
  }
}

int main() {
  cudaStream_t s = probe_stream();
  unsigned long long* acc = nullptr;
  CK(cudaMalloc(&acc, 256 * 64 * 8));
  CK(cudaMemset(acc, 0, 256 * 64 * 8));
  const int N = 240, R = 50;
  const char* names[3] = {"store", "u64 atomic", "f32 atomic"};
  for (int mode = 0; mode < 3; ++mode)
    for (int stride : {1, 2, 4, 16, 64})
      for (int grid : {256, 128, 64}) {
        if (mode == 0 && (stride > 1 || grid != 256)) continue;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < N; ++i) probe_launch(k_atomic, grid, 0, s, true, acc, stride, mode);
        CK(cudaStreamEndCapture(s, &g));
        const double us = 1e3 * time_graph_ms(g, s, 3, R) / N;
        std::printf("%-10s stride=%2d (x8 B) blocks=%3d: %6.2f us/kernel\n", names[mode], stride, grid, us);
      }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
