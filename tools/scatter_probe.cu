// Scatter probe (not part of the build): does reading a kernel's bytes from many scattered places (as the MoE reads
// 8 experts' gate / up / down and their scale words, each in a different 2 MB page of a 19 GB allocation) stream
// slower than one contiguous slice? A CUDA graph of N kernels of 264 blocks x 256 threads, R = 4 rows of 1 KB per
// warp in flight; each kernel reads `kb` KB split into P equal pieces, each piece at its own random 2 MB-aligned
// place in the 18 GB buffer (P = 1: one slice, as tools/stream_probe.cu). Prints us per kernel and GB/s.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/scatter_probe tools/scatter_probe.cu && /tmp/scatter_probe
#include <random>
#include <vector>

#include "probe_util.cuh"

constexpr int kMaxP = 64;
struct Pieces {
  int64_t off[kMaxP];  // byte offset of each piece in the buffer
};

__global__ void __launch_bounds__(256) k_scatter(const uint8_t* w, Pieces p, int np, int64_t rows, float* out) {
  constexpr int R = 4;
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  const int64_t rpp = rows / np;  // rows per piece
  float acc = 0.f;
  for (int64_t r0 = warp; r0 < rows; r0 += R * nw) {
    uint4 v[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t r = r0 + i * nw;
      if (r < rows) {
        const uint8_t* row = w + p.off[r / rpp] + (r % rpp) * 1024;
#pragma unroll
        for (int u = 0; u < 2; ++u) v[i][u] = ldg_stream(row + (lane + 32 * u) * 16);
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (r0 + i * nw < rows)
#pragma unroll
        for (int u = 0; u < 2; ++u) acc += float(v[i][u].x & 15) + float(v[i][u].w >> 28);
  }
  if (acc == -1.f) out[0] = acc;  // keeps the loads
}

int main() {
  const auto [s, buf, out, grid] = probe_setup();
  constexpr int N = kProbeKernels, reps = kProbeReps;
  std::mt19937_64 rng(5);
  const int64_t pages = kProbeSpan / (2 << 20) - 8;
  for (int rep = 0; rep < 2; ++rep)
    for (int64_t kb : {8192, 16384})
      for (int np : {1, 4, 16, 32, 64}) {
        const int64_t rows = (kb << 10) / 1024;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < N; ++i) {
          Pieces p{};
          for (int q = 0; q < np; ++q) p.off[q] = int64_t(rng() % uint64_t(pages)) * (2 << 20);
          if (np == 1) p.off[0] = scattered_slice(i, N);
          k_scatter<<<grid, 256, 0, s>>>(buf, p, np, rows, out);
        }
        CK(cudaStreamEndCapture(s, &g));
        const double us = 1e3 * time_graph_ms(g, s, 2, reps) / N;
        std::printf("pieces %2d  %6lld KB: %6.2f us/kernel %7.1f GB/s\n", np, (long long)kb, us, (kb << 10) / us / 1e3);
      }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
