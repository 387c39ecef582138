// Pipelining probe (not part of the build): can a chain of dependent GEMV-like kernels stream weights while the
// previous kernel still runs? A CUDA graph of 40 "layers" x 6 kernels, each reading the previous kernel's
// 2048-float output (PDL on) and streaming its own weight bytes (the decode step's mix: 14.2, 2.1, 4.7, 1.5, 9.4,
// 5.3 MB), from scattered slices of an 18 GB buffer. Variants:
//   reg264   : today's kernels: 2 blocks/SM, weights loaded into registers after the wait (one wave fills the SM)
//   reg132   : the same with 1 block/SM, so the next kernel's blocks fit beside it
//   smem     : 1 block/SM, the block's weight slice (up to `cap` KB) copied into shared memory with cp.async BEFORE
//              griddepcontrol.wait, launch_dependents at entry, the rest streamed after the wait
//   smem-late: smem, but launch_dependents after the wait (the next kernel launches later)
// Prints ms per step (240 kernels), us per kernel and GB/s.
// nvcc -O3 -arch=sm_90 -o /tmp/pipeline_probe tools/probes/pipeline_probe.cu && /tmp/pipeline_probe
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>


__device__ __forceinline__ float dot16(uint4 v, const float* xs, int lane) {
  return float(v.x & 15) * xs[lane] + float(v.y & 15) + float(v.z >> 28) + float(v.w & 7);
}

// Rows of 1 KB; block b owns rows [b*per, (b+1)*per).
template <bool kStage, bool kEarly>
__global__ void __launch_bounds__(256, 1) k_pipe(const float* xin, float* xout, const uint8_t* w, int64_t bytes,
                                                int cap_rows) {
  extern __shared__ uint4 sw[];
  __shared__ float xs[2048];
  if (kEarly) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int64_t rows = bytes / 1024;
  const int64_t per = (rows + gridDim.x - 1) / gridDim.x;
  const int64_t r0 = blockIdx.x * per, r1 = r0 + per < rows ? r0 + per : rows;
  const int nst = kStage ? int(r1 - r0 < cap_rows ? (r1 > r0 ? r1 - r0 : 0) : cap_rows) : 0;
  for (int i = threadIdx.x; i < nst * 64; i += 256) probe_cp16(sw + i, w + r0 * 1024 + int64_t(i) * 16);
  asm volatile("cp.async.commit_group;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < 2048; i += 256) xs[i] = xin[i];
  if (!kEarly) asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  float acc = 0.f;
  for (int r = wp; r < nst; r += 8) {
    float a = dot16(sw[r * 64 + lane], xs, lane) + dot16(sw[r * 64 + 32 + lane], xs, lane);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    acc += a;
  }
  for (int64_t r = r0 + nst + wp; r < r1; r += 16) {  // two rows per warp in flight
    uint4 v[4];
    const bool two = r + 8 < r1;
    v[0] = ldg_stream(w + r * 1024 + lane * 16);
    v[1] = ldg_stream(w + r * 1024 + (lane + 32) * 16);
    if (two) {
      v[2] = ldg_stream(w + (r + 8) * 1024 + lane * 16);
      v[3] = ldg_stream(w + (r + 8) * 1024 + (lane + 32) * 16);
    }
    float a = dot16(v[0], xs, lane) + dot16(v[1], xs, lane) + (two ? dot16(v[2], xs, lane) + dot16(v[3], xs, lane) : 0.f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    acc += a;
  }
  const int o = blockIdx.x * 8 + wp;
  if (lane == 0 && o < 2048) xout[o] = acc * 1e-30f + xs[o];
}

// Today's style: rows warp-strided over the grid, loaded into registers after the wait.
__global__ void __launch_bounds__(256, 2) k_reg(const float* xin, float* xout, const uint8_t* w, int64_t bytes, int) {
  __shared__ float xs[2048];
  asm volatile("griddepcontrol.wait;" ::: "memory");
  for (int i = threadIdx.x; i < 2048; i += 256) xs[i] = xin[i];
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  const int64_t rows = bytes / 1024;
  float acc = 0.f;
  for (int64_t r = warp; r < rows; r += 2 * nw) {
    uint4 v[4];
    const bool two = r + nw < rows;
    v[0] = ldg_stream(w + r * 1024 + lane * 16);
    v[1] = ldg_stream(w + r * 1024 + (lane + 32) * 16);
    if (two) {
      v[2] = ldg_stream(w + (r + nw) * 1024 + lane * 16);
      v[3] = ldg_stream(w + (r + nw) * 1024 + (lane + 32) * 16);
    }
    float a = dot16(v[0], xs, lane) + dot16(v[1], xs, lane) + (two ? dot16(v[2], xs, lane) + dot16(v[3], xs, lane) : 0.f);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    acc += a;
  }
  if (lane == 0 && warp < 2048) xout[warp] = acc * 1e-30f + xs[warp];
}

using Kern = void (*)(const float*, float*, const uint8_t*, int64_t, int);

int main() {
  cudaStream_t s = probe_stream();
  const int sms = probe_sms();
  uint8_t* buf = probe_buffer();
  float* xv = nullptr;
  CK(cudaMalloc(&xv, 2 * 2048 * 4));
  CK(cudaMemset(xv, 0, 2 * 2048 * 4));
  const double mix_mb[6] = {14.2, 2.1, 4.7, 1.5, 9.4, 5.3};
  struct V { const char* name; Kern k; int grid; bool stage; };
  for (int cap_kb : {48, 96, 112}) {
    const int cap_rows = cap_kb;  // 1 KB rows
    const size_t dsm = size_t(cap_kb) << 10;
    CK(cudaFuncSetAttribute(k_pipe<true, true>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dsm)));
    CK(cudaFuncSetAttribute(k_pipe<true, false>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dsm)));
    const V vs[] = {{"reg264", k_reg, 2 * sms, false},         {"reg132", k_reg, sms, false},
                    {"smem", k_pipe<true, true>, sms, true},    {"smem-late", k_pipe<true, false>, sms, true},
                    {"nostage", k_pipe<false, true>, sms, false}};
    for (const V& v : vs) {
      if (cap_kb != 96 && !v.stage) continue;
      for (int mix = 0; mix < 2; ++mix) {
        const int N = 240, R = 30;
        std::vector<int64_t> bytes(N);
        for (int i = 0; i < N; ++i) bytes[i] = mix ? int64_t(mix_mb[i % 6] * 1e6) / 1024 * 1024 : int64_t(8) << 20;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        double total = 0;
        for (int i = 0; i < N; ++i) {
          const int64_t off = scattered_slice(i, N);
          total += double(bytes[i]);
          probe_launch(v.k, v.grid, v.stage ? dsm : 0, s, true, (const float*)(xv + (i & 1) * 2048),
                       xv + ((i + 1) & 1) * 2048, (const uint8_t*)(buf + off), bytes[i], cap_rows);
        }
        CK(cudaStreamEndCapture(s, &g));
        const double step_ms = time_graph_ms(g, s, 3, R);
        std::printf("%-9s cap=%3d KB %s: %.3f ms/step  %.2f us/kernel  %.0f GB/s\n", v.name, cap_kb,
                    mix ? "mix " : "8 MB", step_ms, 1e3 * step_ms / N, total / step_ms / 1e6);
      }
    }
  }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
