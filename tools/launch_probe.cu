// Launch-cost probe (not part of the build): time per kernel of N empty kernels replayed as a CUDA graph,
// with and without programmatic dependent launch, and launched directly. nvcc -O2 -arch=sm_90 launch_probe.cu
#include <cuda_runtime.h>

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
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  int* np = nullptr;
  if (pdl) cudaLaunchKernelEx(&cfg, k_empty_pdl, np);
  else cudaLaunchKernelEx(&cfg, k_empty, np);
}

int main() {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  const int N = 242, R = 200;
  for (int pdl = 0; pdl < 2; ++pdl)
    for (int grid : {1, 132, 528}) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed);
      for (int i = 0; i < N; ++i) launch(pdl, grid, s);
      cudaStreamEndCapture(s, &g);
      cudaGraphInstantiate(&ge, g, 0);
      cudaGraphUpload(ge, s);
      for (int i = 0; i < 5; ++i) cudaGraphLaunch(ge, s);
      cudaEventRecord(e0, s);
      for (int i = 0; i < R; ++i) cudaGraphLaunch(ge, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      std::printf("graph  pdl=%d grid=%4d: %.3f ms per %d-kernel graph, %.2f us/kernel\n", pdl, grid, ms / R, N,
                  1e3 * ms / R / N);
      // direct launches
      cudaEventRecord(e0, s);
      for (int i = 0; i < R; ++i)
        for (int k = 0; k < N; ++k) launch(pdl, grid, s);
      cudaEventRecord(e1, s);
      cudaEventSynchronize(e1);
      cudaEventElapsedTime(&ms, e0, e1);
      std::printf("direct pdl=%d grid=%4d: %.3f ms per %d kernels, %.2f us/kernel\n", pdl, grid, ms / R, N,
                  1e3 * ms / R / N);
      cudaGraphExecDestroy(ge);
      cudaGraphDestroy(g);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
