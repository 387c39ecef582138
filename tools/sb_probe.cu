// Scale-word probe (not part of the build): does the separate (scale, bias) word load that goes with every 16-byte
// weight chunk (chunk_load in src/cuda/device_util.cuh) slow the weight stream? A CUDA graph of N kernels of 264
// blocks x 256 threads (the decode GEMVs' shape), each on its own cold slice of an 18 GB buffer, R = 4 rows of 1 KB
// per warp in flight, 2 chunks per lane per row. Modes:
//   w      : the 16-byte chunks only (as tools/stream_probe.cu)
//   w+sb   : each chunk also loads its 4-byte word from a separate array (128 B per row, as the MLX layout uploads)
//   w+sb ef: the same with the L2 evict-first hint on both loads (as ldg_weight / ldg_weight_u32)
//   inter  : the word sits right after its row (rows of 1152 B: weights then words), one stream
// Prints us per kernel and GB/s of all bytes read.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/sb_probe tools/sb_probe.cu && /tmp/sb_probe
#include "probe_util.cuh"

__device__ __forceinline__ uint64_t ef_policy() {
  uint64_t pol;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  return pol;
}
template <bool kEF>
__device__ __forceinline__ uint4 ld16(const uint8_t* p) {
  if constexpr (!kEF) return ldg_stream(p);
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0,%1,%2,%3}, [%4], %5;"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "l"(ef_policy()));
  return r;
}
template <bool kEF>
__device__ __forceinline__ uint32_t ld4(const uint8_t* p) {
  if constexpr (!kEF) return __ldg(reinterpret_cast<const uint32_t*>(p));
  uint32_t r;
  asm volatile("ld.global.nc.L2::cache_hint.u32 %0, [%1], %2;" : "=r"(r) : "l"(p), "l"(ef_policy()));
  return r;
}

// mode 0: w, 1: w+sb, 2: w+sb ef, 3: inter
template <int kMode>
__global__ void __launch_bounds__(256) k_sb(const uint8_t* w, int64_t rows, float* out) {
  constexpr int R = 4;
  constexpr bool kEF = kMode == 2;
  constexpr int64_t kRow = kMode == 3 ? 1152 : 1024;
  const uint8_t* sb = w + rows * kRow;  // separate words after the weights (modes 1, 2)
  const int lane = threadIdx.x & 31;
  const int64_t warp = blockIdx.x * 8 + (threadIdx.x >> 5), nw = gridDim.x * 8;
  float acc = 0.f;
  for (int64_t r0 = warp; r0 < rows; r0 += R * nw) {
    uint4 v[R][2];
    uint32_t s[R][2];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int64_t r = r0 + i * nw;
      if (r < rows)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int c = lane + 32 * u;
          v[i][u] = ld16<kEF>(w + r * kRow + c * 16);
          if constexpr (kMode == 1 || kMode == 2) s[i][u] = ld4<kEF>(sb + r * 128 + (c / 2) * 4);
          if constexpr (kMode == 3) s[i][u] = ld4<false>(w + r * kRow + 1024 + (c / 2) * 4);
          if constexpr (kMode == 0) s[i][u] = 0;
        }
    }
#pragma unroll
    for (int i = 0; i < R; ++i)
      if (r0 + i * nw < rows)
#pragma unroll
        for (int u = 0; u < 2; ++u) acc += float(v[i][u].x & 15) + float(v[i][u].w >> 28) + float(s[i][u] & 7);
  }
  if (acc == -1.f) out[0] = acc;  // keeps the loads
}

int main() {
  const auto [s, buf, out, grid] = probe_setup();
  constexpr int N = kProbeKernels, reps = kProbeReps;
  struct Mode { const char* name; void (*k)(const uint8_t*, int64_t, float*); int64_t row_bytes; };
  const Mode modes[] = {{"w", k_sb<0>, 1024}, {"w+sb", k_sb<1>, 1152}, {"w+sb ef", k_sb<2>, 1152},
                        {"inter", k_sb<3>, 1152}};
  for (int rep = 0; rep < 2; ++rep)
    for (const Mode& m : modes)
      for (int64_t kb : {4096, 8192, 16384}) {  // weight KB per kernel
        const int64_t rows = (kb << 10) / 1024;
        cudaGraph_t g;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
        for (int i = 0; i < N; ++i) m.k<<<grid, 256, 0, s>>>(buf + scattered_slice(i, N), rows, out);
        CK(cudaStreamEndCapture(s, &g));
        const double us = 1e3 * time_graph_ms(g, s, 2, reps) / N;
        const double bytes = double(rows) * double(m.row_bytes);
        std::printf("%-8s weights %6lld KB: %6.2f us/kernel %7.1f GB/s (all bytes)\n", m.name, (long long)kb, us,
                    bytes / us / 1e3);
      }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
