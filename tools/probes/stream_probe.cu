// Streaming probe (not part of the build): how fast can 264 blocks of 256 threads (the decode GEMVs' shape, 2 blocks
// per SM) pull cold 1 KB weight rows, by two load mechanisms, with R rows per warp in flight?
//   ldg:  each lane loads its 2 x 16 bytes of each row (ld.global.nc), as the decode GEMVs do;
//   bulk: lane 0 issues one 1 KB cp.async.bulk (global -> shared, TMA engine) per row, completion on an mbarrier;
//         the warp then reads the row from shared memory.
// A CUDA graph of N kernels, each on its own 2 MB-aligned slice of an 18 GB buffer (cold, like the decode step's
// weights), no PDL; prints us per kernel and GB/s (the launch cost is in both: compare against bytes=0).
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/stream_probe tools/probes/stream_probe.cu && /tmp/stream_probe
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>
#include <cstdlib>


__device__ __forceinline__ float use(uint4 v) { return float(v.x & 15) + float(v.y >> 28) + float(v.z & 3) + float(v.w & 1); }

template <int R>
__global__ void __launch_bounds__(256) k_ldg(const uint8_t* w, int64_t rows, float* out) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  float acc = 0.f;
  for (int64_t r0 = warp; r0 < rows; r0 += R * nw) {
    uint4 v[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (r0 + i * nw < rows)
#pragma unroll
        for (int u = 0; u < 2; ++u) v[i][u] = ldg_stream(w + (r0 + i * nw) * 1024 + (lane + 32 * u) * 16);
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (r0 + i * nw < rows) acc += use(v[i][0]) + use(v[i][1]);
  }
  if (acc == -1.f) out[0] = acc;  // keeps the loads
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

template <int R>
__global__ void __launch_bounds__(256) k_bulk(const uint8_t* w, int64_t rows, float* out) {
  extern __shared__ __align__(128) uint8_t sm[];  // [8 warps][R][1024]
  __shared__ __align__(8) uint64_t bar[8][R];
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const int64_t warp = blockIdx.x * 8 + wib, nw = gridDim.x * 8;
  uint8_t* mine = sm + size_t(wib) * R * 1024;
  if (lane == 0)
    for (int i = 0; i < R; ++i) asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(&bar[wib][i])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  __syncwarp();
  float acc = 0.f;
  uint32_t phase = 0;
  for (int64_t r0 = warp; r0 < rows; r0 += R * nw) {
    if (lane == 0) {
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // earlier generic reads before the async writes
      for (int i = 0; i < R; ++i) {
        const int64_t r = r0 + i * nw;
        const uint32_t b = smem_u32(&bar[wib][i]);
        if (r < rows) {
          asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], 1024;" ::"r"(b) : "memory");
          asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], 1024, [%2];"
                       ::"r"(smem_u32(mine + i * 1024)), "l"(w + r * 1024), "r"(b) : "memory");
        } else {
          asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(b) : "memory");
        }
      }
    }
    __syncwarp();
    for (int i = 0; i < R; ++i) {
      const uint32_t b = smem_u32(&bar[wib][i]);
      uint32_t done = 0;
      while (!done)
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b), "r"(phase) : "memory");
      if (r0 + i * nw < rows) {
        const uint4* row = reinterpret_cast<const uint4*>(mine + i * 1024);
        acc += use(row[lane]) + use(row[lane + 32]);
      }
    }
    phase ^= 1u;
    __syncwarp();
  }
  if (acc == -1.f) out[0] = acc;
}

int main() {
  const auto [s, buf, out, grid] = probe_setup();
  constexpr int N = kProbeKernels, reps = kProbeReps;
  struct Mode { const char* name; void (*k)(const uint8_t*, int64_t, float*); int R; bool bulk; };
  const Mode modes[] = {{"ldg", k_ldg<2>, 2, false},   {"ldg", k_ldg<4>, 4, false},   {"ldg", k_ldg<8>, 8, false},
                        {"bulk", k_bulk<2>, 2, true}, {"bulk", k_bulk<4>, 4, true}, {"bulk", k_bulk<8>, 8, true}};
  for (const Mode& m : modes) {
    const size_t smem = m.bulk ? size_t(8) * m.R * 1024 : 0;
    if (smem) CK(cudaFuncSetAttribute(m.k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    for (int64_t kb : {0, 4096, 8192, 16384}) {
      const int64_t rows = (kb << 10) / 1024;
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      for (int i = 0; i < N; ++i) {
        m.k<<<grid, 256, smem, s>>>(buf + scattered_slice(i, N), rows, out);
      }
      CK(cudaStreamEndCapture(s, &g));
      const double us = 1e3 * time_graph_ms(g, s, 2, reps) / N;
      std::printf("%-4s R=%d grid=%d bytes=%6lld KB: %6.2f us/kernel %7.1f GB/s\n", m.name, m.R, grid, (long long)kb, us,
                  (kb << 10) / us / 1e3);
    }
  }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
