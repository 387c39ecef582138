// Broadcast-read probe (not part of the build; written in the session of 2026-11-29 night 4, NOT YET RUN): is a
// vector that every block of a decode kernel reads at once (x: 8 KB, the router logits: 1 KB, MoE act: 18 KB) slow
// because 264 blocks hit the same L2 lines? One kernel of 2 blocks x 256 threads per SM (the decode GEMVs' shape).
// All blocks spin until block 0 releases a flag (after ~5 us, so that every block is resident), then each block
// reads `bytes` from replica (block % R) of an L2-resident buffer (warmed first), sums it and stamps the time.
// Prints, per vector size and replica count R: the flag release -> last block seen (the spin on one word), and
// the time from each block seeing the flag to its read done (mean and max over blocks).
// R = 1 is today's form (every block the same addresses); if it is much slower than R = 8 or R = 264, decode
// kernels should read replicated x / logits / act (written R times by their producers).
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/bcast tools/broadcast_probe.cu && /tmp/bcast
#include "probe_util.cuh"

#include <vector>


__global__ void k_warm(const float4* buf, int64_t n4, float* sink) {
  float a = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(gridDim.x) * blockDim.x)
    a += __ldcg(buf + i).x;
  if (a == -1.f) sink[0] = a;
}

// t[0]: flag release; t[1 + 2b], t[2 + 2b]: block b saw the flag, block b's read done
__global__ void __launch_bounds__(256, 2) k_bcast(const float4* buf, int n4, int reps, unsigned* flag,
                                                  unsigned long long* t, float* sink) {
  __shared__ float red[8];
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < 5000) {}
    t[0] = now_ns();
    __threadfence();
    atomicExch(flag, 1u);
  }
  if (threadIdx.x == 0) {  // gives up after 100 ms (a block that is not resident must not hang the probe)
    const unsigned long long w0 = now_ns();
    while (probe_ld_acquire(flag) == 0u && now_ns() - w0 < 100000000ull) {}
  }
  __syncthreads();
  const unsigned long long seen = now_ns();
  const float4* src = buf + int64_t(blockIdx.x % reps) * n4;
  float a = 0.f;
  for (int i = threadIdx.x; i < n4; i += blockDim.x) {  // all of a thread's loads issued before the sum
    const float4 v = __ldcg(src + i);
    a += v.x + v.y + v.z + v.w;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < 8; ++w) s += red[w];
    if (s == -1.f) sink[0] = s;
    t[1 + 2 * blockIdx.x] = seen;
    t[2 + 2 * blockIdx.x] = now_ns();
  }
}

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = 2 * sms;
  const int max_bytes = 18 * 1024;
  const int64_t n4_all = int64_t(blocks) * max_bytes / 16;
  float4* buf = nullptr;
  float* sink = nullptr;
  unsigned* flag = nullptr;
  unsigned long long* t = nullptr;
  CK(cudaMalloc(&buf, n4_all * 16));
  CK(cudaMemset(buf, 0, n4_all * 16));
  CK(cudaMalloc(&sink, 16));
  CK(cudaMalloc(&flag, 4));
  CK(cudaMalloc(&t, (1 + 2 * size_t(blocks)) * 8));
  std::vector<unsigned long long> h(1 + 2 * size_t(blocks));
  for (const int bytes : {1024, 8192, 18432}) {
    for (const int reps : {1, 2, 8, 32, blocks}) {
      double rel = 0, mean = 0, mx = 0;
      const int runs = 5;
      for (int run = 0; run < runs; ++run) {
        CK(cudaMemset(flag, 0, 4));
        k_warm<<<sms, 256>>>(buf, n4_all, sink);
        k_bcast<<<blocks, 256>>>(buf, bytes / 16, reps, flag, t, sink);
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(h.data(), t, h.size() * 8, cudaMemcpyDeviceToHost));
        unsigned long long last_seen = 0;
        double sum = 0, m = 0;
        for (int b = 0; b < blocks; ++b) {
          const unsigned long long s = h[1 + 2 * b], d = h[2 + 2 * b];
          last_seen = s > last_seen ? s : last_seen;
          sum += double(d - s);
          m = double(d - s) > m ? double(d - s) : m;
        }
        rel += double(last_seen - h[0]) / runs;
        mean += sum / blocks / runs;
        mx += m / runs;
      }
      std::printf("%6d B, R = %3d: release -> last block saw the flag %7.1f ns; flag -> read done mean %7.1f ns, "
                  "max %7.1f ns (mean of %d runs)\n", bytes, reps, rel, mean, mx, runs);
    }
  }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
