// Launch-cost probe (not part of the build): time per kernel of N empty kernels replayed as a CUDA graph,
// with and without programmatic dependent launch, and launched directly.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/p tools/probes/launch_probe.cu && /tmp/p
#include "probe_util.cuh"

#include <cstdio>

__global__ void k_empty(int* p) {
  if (p && threadIdx.x == 9999) p[0] = 1;
}
__global__ void k_empty_pdl(int* p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  if (p && threadIdx.x == 9999) p[0] = 1;
}

static void launch(bool pdl, int grid, cudaStream_t s) {
  int* np = nullptr;
  if (pdl) probe_launch(k_empty_pdl, grid, 0, s, true, np);
  else probe_launch(k_empty, grid, 0, s, false, np);
}

int main() {
  cudaStream_t s = probe_stream();
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int N = 242, R = 200;
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int grid : {1, 132, 528}) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      for (int i = 0; i < N; ++i) launch(pdl, grid, s);
      CK(cudaStreamEndCapture(s, &g));
      float ms = float(time_graph_ms(g, s, 5, R));
      std::printf("graph  pdl=%d grid=%4d: %.3f ms per %d-kernel graph, %.2f us/kernel\n", pdl, grid, ms, N,
                  1e3 * ms / N);
      // direct launches
      cudaEventRecord(e0, s);
      for (int i = 0; i < R; ++i)
        for (int k = 0; k < N; ++k) launch(pdl, grid, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&ms, e0, e1);
      std::printf("direct pdl=%d grid=%4d: %.3f ms per %d kernels, %.2f us/kernel\n", pdl, grid, ms / R, N,
                  1e3 * ms / R / N);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
