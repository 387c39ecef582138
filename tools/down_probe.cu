// MoE down probe (not part of the build): do MoE down's reads, 9 matrices of 2048 rows x 256 bytes (the k = 8 routed
// experts' and the shared expert's 4-bit rows) plus their 32-byte (scale, bias) rows, one hidden row per warp with
// all its 144 chunks in flight (5 per lane, as k_moe_down), stream slower when the 8 expert matrices lie 512 KB
// apart in one stack (a power-of-two stride, as the checkpoint stores them) than when each lies at its own random
// place? A CUDA graph of N kernels of 228 blocks x 288 threads (down's launch), each with new random experts.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/down_probe tools/down_probe.cu && /tmp/down_probe
#include <random>

#include "probe_util.cuh"

constexpr int kMats = 9, kRows = 2048, kRowBytes = 256, kWordBytes = 32;
constexpr int kThreads = 288, kWarps = kThreads / 32;  // down's block: one hidden row per warp
constexpr int64_t kLayerGap = 8 << 20;                 // between one layer slot's stacks
constexpr int64_t kMatBytes = int64_t(kRows) * kRowBytes;  // 512 KB
struct Mats {
  int64_t w[kMats], sb[kMats];  // byte offsets of each matrix's rows and words in the buffer
};

__global__ void __launch_bounds__(kThreads) k_down_probe(const uint8_t* buf, Mats m, float* out) {
  constexpr int U = 5, cpr = kRowBytes / 16, nch = kMats * cpr;
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kWarps + (threadIdx.x >> 5);
  if (row >= kRows) return;
  uint4 v[U];
  uint32_t s[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int c = lane + 32 * u;
    if (c < nch) {
      const int e = c / cpr, cc = c % cpr;
      v[u] = ldg_stream(buf + m.w[e] + int64_t(row) * kRowBytes + cc * 16);
      // the chunk's (scale, bias) word: 32 elements a chunk, 64 a group
      s[u] = *reinterpret_cast<const uint32_t*>(buf + m.sb[e] + int64_t(row) * kWordBytes + (cc / 2) * 4);
    }
  }
  float acc = 0.f;
#pragma unroll
  for (int u = 0; u < U; ++u)
    if (lane + 32 * u < nch) acc += float(v[u].x & 15) + float(v[u].w >> 28) + float(s[u] & 7);
  if (acc == -1.f) out[0] = acc;  // keeps the loads
}

int main() {
  const auto [s, buf, out, grid0] = probe_setup();
  (void)grid0;
  constexpr int N = kProbeKernels, reps = kProbeReps;
  const int grid = (kRows + kWarps - 1) / kWarps;
  std::mt19937_64 rng(7);
  // stacks of 256 experts: weights 128 MB, words 16 MB, one pair per layer slot, spread over the span
  const int64_t stack_w = 256 * kMatBytes, stack_sb = 256 * int64_t(kRows) * kWordBytes;
  const int64_t layers = kProbeSpan / (stack_w + stack_sb + kLayerGap) - 1;
  const int64_t pages = kProbeSpan / (2 << 20) - 8;
  const char* names[4] = {"stacked (512 KB stride)", "random 2 MB-aligned places", "random places + 4 KB offsets",
                          "one contiguous range"};
  for (int rep = 0; rep < 2; ++rep)
    for (int mode = 0; mode < 4; ++mode) {
      cudaGraph_t g;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
      for (int i = 0; i < N; ++i) {
        Mats m{};
        const int64_t L = int64_t(rng() % uint64_t(layers));
        const int64_t lw = L * (stack_w + stack_sb + kLayerGap), lsb = lw + stack_w;
        for (int j = 0; j < kMats; ++j) {
          const int64_t e = int64_t(rng() % 256);
          if (mode == 0) {
            m.w[j] = lw + e * kMatBytes;
            m.sb[j] = lsb + e * int64_t(kRows) * kWordBytes;
          } else if (mode == 3) {
            m.w[j] = lw + j * (kMatBytes + int64_t(kRows) * kWordBytes);
            m.sb[j] = m.w[j] + kMatBytes;
          } else {
            const int64_t off = mode == 2 ? int64_t(rng() % 256) * 4096 : 0;
            m.w[j] = int64_t(rng() % uint64_t(pages)) * (2 << 20) + off;
            m.sb[j] = int64_t(rng() % uint64_t(pages)) * (2 << 20) + off;
          }
        }
        k_down_probe<<<grid, kThreads, 0, s>>>(buf, m, out);
      }
      CK(cudaStreamEndCapture(s, &g));
      const double us = 1e3 * time_graph_ms(g, s, 2, reps) / N;
      const double mb = double(kMats) * kRows * (kRowBytes + kWordBytes) / 1e6;
      std::printf("%-30s %6.2f us/kernel %7.1f GB/s (%.2f MB)\n", names[mode], us, mb * 1e3 / us, mb);
    }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
