// Persistent-step probe (not part of the build): what would one persistent kernel for the whole decode step reach
// on the step's byte mix, against the chain of kernels (tools/probes/pipeline_probe.cu: 0.842 ms per step for today's
// kernel form, 0.683 ms with weights staged before the PDL wait)? One cooperative launch of one block per SM runs 40
// "layers" x 6 stages (14.2, 2.1, 4.7, 1.5, 9.4, 5.3 MB: in_proj, recurrence state, out_proj, router/attention side,
// routed gate/up, down), each stage reading the 2048 floats the previous stage wrote (a grid barrier between
// stages: a counter, release/acquire) and dotting its own 1 KB weight rows (block b owns rows [b*per, (b+1)*per)).
// Variants:
//   barrier : no bytes: the chain of 240 grid barriers alone
//   stream  : rows loaded into registers after the barrier, two rows per warp in flight
//   prefetch: the next stage's rows (up to cap KB per block) copied into shared memory (cp.async) while the current
//             stage runs, except a routed gate/up stage (stage 4 of 6), whose rows are known only after its barrier
//   all     : prefetch, the routed stage too (an upper bound: no routing dependence)
// each with the barrier as one counter (132 atomics on one word, one thread per block spinning) or as per-block
// flags (each block stores its stage number to its own word; threads 0..gridDim-1 of every block each poll one: no
// atomics)
// Prints ms per step, us per stage and GB/s.
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/persist_probe tools/probes/persist_probe.cu && /tmp/persist_probe
#include "probe_util.cuh"

#include <cstdint>
#include <cstdio>
#include <vector>

constexpr int kStages = 240, kMix = 6, kRouted = 4;
constexpr int kThr = 512, kWp = kThr / 32;

struct Plan {
  const uint8_t* w[kStages];  // the stage's rows
  int rows[kStages];          // 1 KB rows
};


// MODE 0 barrier, 1 stream, 2 prefetch, 3 all; FLAGS: per-block flags (bar[1 + block]) instead of the counter bar[0]
template <int MODE, bool FLAGS>
__global__ void __launch_bounds__(kThr, 1) k_persist(const __grid_constant__ Plan p, float* xv, unsigned* bar,
                                                     int cap_rows, unsigned long long* stamp) {
  extern __shared__ uint4 sw[];  // two buffers of cap_rows rows
  __shared__ float xs[2048];
  const int lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
  auto span = [&](int i, int& r0, int& r1) {
    const int per = (p.rows[i] + gridDim.x - 1) / gridDim.x;
    r0 = min(p.rows[i], int(blockIdx.x) * per);
    r1 = min(p.rows[i], r0 + per);
  };
  auto can_pre = [&](int i) { return MODE == 3 || (MODE == 2 && i % kMix != kRouted); };
  auto prefetch = [&](int i) {  // stage i's first cap rows into buffer i & 1 (one commit group, maybe empty)
    if (i < kStages && can_pre(i)) {
      int r0, r1;
      span(i, r0, r1);
      const int n = min(r1 - r0, cap_rows);
      uint4* dst = sw + size_t(i & 1) * cap_rows * 64;
      for (int k = threadIdx.x; k < n * 64; k += kThr) probe_cp16(dst + k, p.w[i] + int64_t(r0) * 1024 + int64_t(k) * 16);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
  };
  if (MODE >= 2) prefetch(0);
  for (int i = 0; i < kStages; ++i) {
    if (MODE >= 2) prefetch(i + 1);
    if (i > 0) {  // every block finished stage i - 1
      if (FLAGS) {
        for (int b = threadIdx.x; b < int(gridDim.x); b += kThr)
          while (probe_ld_acquire(bar + 1 + b) < unsigned(i)) {
          }
      } else if (threadIdx.x == 0) {
        while (probe_ld_acquire(bar) < unsigned(i) * gridDim.x) {
        }
      }
      __syncthreads();
    }
    if (blockIdx.x == 0 && threadIdx.x == 0 && stamp) stamp[i] = now_ns();
    const float* xin = xv + (i & 1) * 2048;
    for (int k = threadIdx.x; k < 2048; k += kThr) xs[k] = __ldcg(xin + k);
    if (MODE >= 2) asm volatile("cp.async.wait_group 1;" ::: "memory");  // stage i's group (not i + 1's)
    __syncthreads();
    float acc = 0.f;
    if (MODE != 0) {
      int r0, r1;
      span(i, r0, r1);
      int nst = 0;
      if (can_pre(i)) {
        nst = min(r1 - r0, cap_rows);
        const uint4* src = sw + size_t(i & 1) * cap_rows * 64;
        for (int r = wp; r < nst; r += kWp)
          acc += probe_dot16(src[r * 64 + lane], xs, lane * 2) + probe_dot16(src[r * 64 + 32 + lane], xs, lane * 2 + 64);
      }
      for (int r = r0 + nst + wp; r < r1; r += 2 * kWp) {  // two rows per warp in flight
        const uint8_t* w = p.w[i];
        const bool two = r + kWp < r1;
        uint4 v0 = ldg_stream(w + int64_t(r) * 1024 + lane * 16), v1 = ldg_stream(w + int64_t(r) * 1024 + (lane + 32) * 16);
        uint4 v2 = {}, v3 = {};
        if (two) {
          v2 = ldg_stream(w + int64_t(r + kWp) * 1024 + lane * 16);
          v3 = ldg_stream(w + int64_t(r + kWp) * 1024 + (lane + 32) * 16);
        }
        acc += probe_dot16(v0, xs, lane * 2) + probe_dot16(v1, xs, lane * 2 + 64) +
               (two ? probe_dot16(v2, xs, lane * 2) + probe_dot16(v3, xs, lane * 2 + 64) : 0.f);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    }
    const int o = blockIdx.x * kWp + wp;
    float* xout = xv + ((i + 1) & 1) * 2048;
    if (lane == 0 && o < 2048) __stcg(xout + o, acc * 1e-30f + xs[o]);
    __syncthreads();  // this block's outputs written; its reads of buffer i & 1 done
    if (threadIdx.x == 0) {
      __threadfence();
      if (FLAGS) *reinterpret_cast<volatile unsigned*>(bar + 1 + blockIdx.x) = unsigned(i + 1);
      else atomicAdd(bar, 1u);
    }
  }
}

int main() {
  cudaStream_t s = probe_stream();
  const int sms = probe_sms();
  uint8_t* buf = probe_buffer();
  float* xv = nullptr;
  unsigned* bar = nullptr;
  unsigned long long* stamp = nullptr;
  CK(cudaMalloc(&xv, 2 * 2048 * 4));
  CK(cudaMemset(xv, 0, 2 * 2048 * 4));
  CK(cudaMalloc(&bar, 4 * (1 + sms)));
  CK(cudaMalloc(&stamp, kStages * 8));
  const double mix_mb[kMix] = {14.2, 2.1, 4.7, 1.5, 9.4, 5.3};
  Plan plan{};
  double total = 0;
  for (int i = 0; i < kStages; ++i) {
    plan.rows[i] = int(mix_mb[i % kMix] * 1e6) / 1024;
    plan.w[i] = buf + scattered_slice(i, kStages);
    total += plan.rows[i] * 1024.0;
  }
  using K = void (*)(Plan, float*, unsigned*, int, unsigned long long*);
  struct V { const char* name; K k; bool bytes; };
  const V vs[] = {{"barrier", k_persist<0, false>, false}, {"stream", k_persist<1, false>, true},
                  {"prefetch", k_persist<2, false>, true}, {"all", k_persist<3, false>, true},
                  {"barrier-flags", k_persist<0, true>, false}, {"stream-flags", k_persist<1, true>, true},
                  {"prefetch-flags", k_persist<2, true>, true}, {"all-flags", k_persist<3, true>, true}};
  for (int cap_kb : {64, 104}) {
    const size_t dsm = size_t(2 * cap_kb) << 10;
    for (const V& v : vs) {
      if (cap_kb != 104 && (!v.bytes || v.k == vs[1].k || v.k == vs[5].k)) continue;
      CK(cudaFuncSetAttribute(v.k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(dsm)));
      int cap = cap_kb;
      unsigned long long* st = stamp;
      void* args[] = {&plan, &xv, &bar, &cap, &st};
      auto once = [&] {
        CK(cudaMemsetAsync(bar, 0, 4 * (1 + sms), s));
        CK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(v.k), dim3(sms), dim3(kThr), args, dsm, s));
      };
      const double ms = time_ms(once, s, 3, 20);
      std::vector<unsigned long long> t(kStages);
      CK(cudaMemcpy(t.data(), stamp, kStages * 8, cudaMemcpyDeviceToHost));
      double per[kMix] = {};  // mean us from stage i's start to stage i+1's start, by kind (block 0's view)
      for (int i = 0; i + 1 < kStages; ++i) per[i % kMix] += (t[i + 1] - t[i]) * 1e-3 / (kStages / kMix);
      std::printf("%-14s cap=%3d KB: %.3f ms/step  %.2f us/stage  %.0f GB/s  | per kind us: %.2f %.2f %.2f %.2f %.2f %.2f\n",
                  v.name, cap_kb, ms, 1e3 * ms / kStages, v.bytes ? total / ms / 1e6 : 0.0, per[0], per[1], per[2],
                  per[3], per[4], per[5]);
    }
  }
  std::printf("err: %s\n", cudaGetErrorString(cudaGetLastError()));
  return 0;
}
