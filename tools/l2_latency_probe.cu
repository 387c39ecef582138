// L2 latency probe (not part of the build; results in docs/cuda-decode.md, night 4): does an L2 hit wait behind
// DRAM misses? One kernel of 2 blocks x 256 threads per SM (the decode GEMVs' shape). Warps 0..6 of every
// block stream cold 1 KB rows from an 18 GB buffer (4 rows per warp in flight, as the GEMVs do) until the chase
// ends; lane 0 of warp 7 of block 0 walks a pointer chain through a 1 MB table read just before (L2-resident), one
// dependent load per hop, and reports ns per hop. Modes:
//   0: nobody streams (idle L2 latency);
//   1: the other warps stream, the chasing warp has no load of its own in flight;
//   2: as 1, and the chasing warp first issues 4 KB of its own cold loads (as a decode kernel's warp issues its
//      weight rows before it reads x).
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/l2p tools/l2_latency_probe.cu && /tmp/l2p
#include "probe_util.cuh"

#include <utility>
#include <vector>

constexpr int kHops = 64;
constexpr int kStride = 32;  // u32 elements between chain entries: one 128-byte line each

__device__ __forceinline__ uint32_t ld_cg(const uint32_t* p) {  // L2, not L1
  uint32_t v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__global__ void k_warm(const uint32_t* chain, int n, uint32_t* sink) {
  uint32_t a = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a += ld_cg(chain + i);
  if (a == 0xdeadbeefu) sink[0] = a;
}

__global__ void __launch_bounds__(256, 2) k_probe(const uint8_t* w, int64_t rows, const uint32_t* chain, int mode,
                                                   unsigned long long* out, uint32_t* sink) {
  const int lane = threadIdx.x & 31, wib = threadIdx.x >> 5;
  const bool chaser = blockIdx.x == 0 && wib == 7;
  float acc = 0.f;
  if (chaser) {
    // wait ~3 us so that the streams are under way
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < 3000) {}
    uint4 own[4] = {};
    if (mode == 2)  // 4 KB of this warp's own cold loads in flight at the chase (used only after it)
      for (int i = 0; i < 4; ++i) own[i] = ldg_stream(w + (int64_t(i) * 1031 + 77) * 1024 + lane * 32);
    if (lane == 0) {
      uint32_t p = 0;
      const unsigned long long a = now_ns();
      for (int h = 0; h < kHops; ++h) p = ld_cg(chain + p);
      const unsigned long long b = now_ns();
      out[0] = b - a;
      sink[1] = p;
      __threadfence();
      atomicExch(sink + 3, 1u);  // the streamers stop
    }
    for (int i = 0; i < 4; ++i) acc += float(own[i].x & 1);
  } else if (mode != 0 && wib < 7) {
    const int64_t warp = blockIdx.x * 7 + wib, nw = int64_t(gridDim.x) * 7;
    for (int64_t r0 = warp; r0 < rows; r0 += 4 * nw) {  // until the chase is over (or the window ends)
      if (*reinterpret_cast<volatile uint32_t*>(sink + 3)) break;
      uint4 v[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (r0 + i * nw < rows)
#pragma unroll
          for (int u = 0; u < 2; ++u) v[i][u] = ldg_stream(w + (r0 + i * nw) * 1024 + (lane + 32 * u) * 16);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (r0 + i * nw < rows) acc += float(v[i][0].x & 1) + float(v[i][1].y & 1);
    }
  }
  if (acc == -1.f) sink[2] = 1;
}

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  uint8_t* buf = probe_buffer();
  const int n = (1 << 20) / 4;  // 1 MB table
  const int entries = n / kStride;
  std::vector<uint32_t> h(n, 0), order(entries);
  for (int i = 0; i < entries; ++i) order[i] = i;
  srand(7);
  for (int i = entries - 1; i > 0; --i) std::swap(order[i], order[rand() % (i + 1)]);
  for (int i = 0; i < entries; ++i) h[size_t(order[i]) * kStride] = order[(i + 1) % entries] * kStride;  // one cycle
  uint32_t *chain = nullptr, *sink = nullptr;
  unsigned long long* out = nullptr;
  CK(cudaMalloc(&chain, n * 4));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMalloc(&out, 8));
  CK(cudaMemcpy(chain, h.data(), n * 4, cudaMemcpyHostToDevice));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t rows = (int64_t(2) << 30) / 1024;  // a 2 GB window (~0.7 ms at 3 TB/s: longer than the chase)
  for (int mode = 0; mode < 3; ++mode)
    for (int rep = 0; rep < 5; ++rep) {
      const int64_t off = int64_t(rep % 8) * (int64_t(2) << 30);  // a cold 2 GB window each time
      CK(cudaMemset(sink, 0, 64));
      k_warm<<<sms, 256>>>(chain, n, sink);
      k_probe<<<2 * sms, 256>>>(buf + off, rows, chain, mode, out, sink);
      CK(cudaDeviceSynchronize());
      unsigned long long ns = 0;
      CK(cudaMemcpy(&ns, out, 8, cudaMemcpyDeviceToHost));
      std::printf("mode %d rep %d: %7.1f ns per dependent L2 hit (%d hops)\n", mode, rep, double(ns) / kHops, kHops);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
