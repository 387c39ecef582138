// Shared by the standalone probes in tools/ (not part of the build; each compiles alone:
// nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/p tools/probes/NAME.cu): error check, the cold streaming load, the 18 GB buffer of
// "weights" with its scattered slices, the timing of a captured graph, and a device clock.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); std::exit(1); } } while (0)

// 16 bytes, read-only, not kept in L1 (as the decode kernels stream weights)
__device__ __forceinline__ uint4 ldg_stream(const void* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// %globaltimer in ns (the in-graph stamps of LILY_PROFILE=trace use the same clock)
__device__ __forceinline__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

constexpr int64_t kProbeSpan = int64_t(18) << 30;  // like the decode step's 19.5 GB of weights

// 16 bytes global -> shared, asynchronously (cp.async, through L2 only)
__device__ __forceinline__ void probe_cp16(void* smem, const void* g) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(g) : "memory");
}

// A flag word read with acquire semantics at GPU scope (the spin loops of the flag / barrier probes)
__device__ __forceinline__ unsigned probe_ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The device's SM count.
inline int probe_sms() {
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

// Probe start: stdout unbuffered (lines show as they come), a non-blocking stream for the graphs.
inline cudaStream_t probe_stream() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

// The span, filled (exits when the device has no room).
inline uint8_t* probe_buffer() {
  uint8_t* buf = nullptr;
  if (cudaMalloc(&buf, kProbeSpan) != cudaSuccess) { std::printf("alloc failed\n"); std::exit(1); }
  CK(cudaMemset(buf, 1, kProbeSpan));
  return buf;
}

constexpr int kProbeKernels = 240, kProbeReps = 20;  // kernels per graph, timed launches of it

// The streaming probes' start: stream, filled span, a 64-byte scratch the kernels write to keep their loads, and
// the grid of 2 blocks of 256 threads per SM (the decode GEMVs' shape).
struct ProbeSetup {
  cudaStream_t s;
  uint8_t* buf;
  float* out;
  int grid;
};
inline ProbeSetup probe_setup() {
  ProbeSetup p{probe_stream(), probe_buffer(), nullptr, 0};
  CK(cudaMalloc(&p.out, 64));
  p.grid = 2 * probe_sms();
  return p;
}

// Kernel i of n reads its own 2 MB-aligned slice of the span, in a scattered order (cold in L2 and TLB).
inline int64_t scattered_slice(int i, int n) {
  return (int64_t(i) * 73 % n) * (kProbeSpan / n / (2 << 20) * (2 << 20));
}

// Launches kern<<<grid, 256, smem>>> on s, with programmatic dependent launch (PDL) allowed when pdl is set.
template <typename... KArgs, typename... Args>
void probe_launch(void (*kern)(KArgs...), int grid, size_t smem, cudaStream_t s, bool pdl, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(256);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CK(cudaLaunchKernelEx(&cfg, kern, args...));
}

// Calls enqueue() (work on stream s) `warm` times, then times `reps` calls by events on s; ms per call.
template <class F>
double time_ms(F&& enqueue, cudaStream_t s, int warm, int reps) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < warm; ++i) enqueue();
  CK(cudaEventRecord(e0, s));
  for (int i = 0; i < reps; ++i) enqueue();
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms = 0.f;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return double(ms) / reps;
}

// Instantiates a captured graph, launches it `warm` times, then times `reps` launches; ms per launch. Destroys both.
inline double time_graph_ms(cudaGraph_t g, cudaStream_t s, int warm, int reps) {
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  const double ms = time_ms([&] { CK(cudaGraphLaunch(ge, s)); }, s, warm, reps);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms;
}

// The GEMV-like probes (xload_probe, flag_probe): x is kProbeX floats in shared memory; each warp dots the R rows of
// 1 KB it loaded before the wait (v) and one more row it loads after, and writes its sum to xout[warp] (keeping the
// loads live; the 1e-30 keeps x stable across the chain).
constexpr int kProbeX = 2048;
__device__ __forceinline__ float probe_dot16(uint4 v, const float* xs, int i) {
  return float(v.x & 15) * xs[i] + float(v.y & 15) * xs[i + 1] + float(v.z >> 28) + float(v.w & 7);
}
template <int R, int RV>
__device__ __forceinline__ void probe_rows_tail(const uint4 (&v)[RV][2], const float* xs, const uint8_t* w,
                                                int64_t warp, int64_t nw, float* xout) {
  const int lane = threadIdx.x & 31;
  float acc = 0.f;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int u = 0; u < 2; ++u) acc += probe_dot16(v[r][u], xs, (lane * 8 + u) & (kProbeX - 2));
  {  // one more row after the wait
    const int64_t row = warp + R * nw;
    uint4 q0 = ldg_stream(w + row * 1024 + lane * 16), q1 = ldg_stream(w + row * 1024 + (lane + 32) * 16);
    acc += probe_dot16(q0, xs, lane * 2) + probe_dot16(q1, xs, lane * 2 + 64);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  if (lane == 0 && warp < kProbeX) xout[warp] = acc * 1e-30f + xs[warp];
}
