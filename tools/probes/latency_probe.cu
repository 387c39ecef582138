// Per-kernel latency probe (not part of the build): a CUDA graph of N GEMV-like kernels chained through a
// 2048-float vector (each kernel reads the previous one's output, PDL on), each streaming `bytes` of "weights"
// with 16-byte loads (4 per lane in flight), from its own slice of a buffer of kProbeSpan bytes (cold, like the
// decode step's 19.5 GB of weights) or all from the same slice (L2/TLB hot). Prints us per kernel and GB/s.
// nvcc -O3 -arch=sm_90 -o /tmp/latency_probe tools/probes/latency_probe.cu && /tmp/latency_probe
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>



__global__ void __launch_bounds__(256) k_step(const float* xin, float* xout, const uint8_t* w, int64_t bytes,
                                              int pdl) {
  __shared__ float xs[2048];
  if (pdl) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < 2048; i += 256) xs[i] = xin[i];
  __syncthreads();
  if (pdl) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  const int64_t rows = bytes / 1024;  // 1 KB rows (a 2048-col 4-bit row)
  float acc = 0.f;
  for (int64_t r = warp; r < rows; r += nw) {
    uint4 v[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) v[u] = ldg_stream(w + r * 1024 + (lane + 32 * u) * 16);
    float a = 0.f;
#pragma unroll
    for (int u = 0; u < 2; ++u) a += float(v[u].x & 15) * xs[lane] + float(v[u].y & 15) + float(v[u].z >> 28) + float(v[u].w);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    acc += a;
  }
  if (lane == 0 && warp < 2048) xout[warp] = acc * 1e-30f + xs[warp & 2047];
  else if (lane == 0) xout[warp & 2047] += 0.f;
}

int main() {
  cudaStream_t s = probe_stream();
  uint8_t* buf = probe_buffer();
  float* xv = nullptr;
  cudaMalloc(&xv, 2 * 2048 * 4);
  cudaMemset(xv, 0, 2 * 2048 * 4);
  const int N = 240, R = 50;
  for (int pdl = 1; pdl >= 0; --pdl)
    for (int hot = 0; hot < 2; ++hot)
      for (int64_t kb : {0, 64, 1024, 4096, 8192, 16384})
        for (int grid : {132, 264, 528}) {
          const int64_t bytes = kb << 10;
          cudaGraph_t g;
          CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
          for (int i = 0; i < N; ++i) {
            const int64_t off = hot ? 0 : scattered_slice(i, N);
            const float* xi = xv + (i & 1) * 2048;
            float* xo = xv + ((i + 1) & 1) * 2048;
            const uint8_t* wp = buf + off;
            probe_launch(k_step, grid, 0, s, pdl != 0, xi, xo, wp, bytes, pdl);
          }
          CK(cudaStreamEndCapture(s, &g));
          const double us = 1e3 * time_graph_ms(g, s, 3, R) / N;
          std::printf("pdl=%d %s bytes=%6lld KB grid=%3d: %6.2f us/kernel  %7.1f GB/s\n", pdl, hot ? "hot " : "cold",
                      (long long)kb, grid, us, bytes / us / 1e3);
        }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
