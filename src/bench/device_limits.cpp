#include "bench/device_limits.h"

#include <thread>

#include "cpu/fast/q4_kernels.h"
#ifdef LILY_HAVE_CUDA
#include "cuda/cuda_factory.h"
#endif

#include <chrono>
#include <cstring>
#include <memory>

#include "bench/machine_info.h"
#include "core/error.h"
#include "core/parallel.h"

namespace lily {

std::vector<LimitsProbe>& limits_probes() {
  static std::vector<LimitsProbe> p;
  return p;
}

DeviceLimits probe_device_limits(const std::string& backend_name, double seconds) {
  const LimitsProbe* best = nullptr;
  for (const auto& p : limits_probes())
    if (backend_name.rfind(p.backend_prefix, 0) == 0 && (!best || std::strlen(p.backend_prefix) > std::strlen(best->backend_prefix)))
      best = &p;
  if (!best) throw Error("no device-limits probe is registered for backend '" + backend_name + "'");
  return best->probe(seconds);
}

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
}  // namespace

double cpu_copy_gbps(double seconds, size_t bytes) {
  std::unique_ptr<uint8_t[]> src(new uint8_t[bytes]), dst(new uint8_t[bytes]);
  const int threads = hardware_threads();
  auto copy_all = [&] {
    parallel_for(int64_t(bytes), int64_t(bytes) / threads, [&](int64_t b, int64_t e) {
      std::memcpy(dst.get() + b, src.get() + b, size_t(e - b));
    }, threads);
  };
  std::memset(src.get(), 1, bytes);  // touch every page before timing
  copy_all();
  double best = 0;
  auto start = Clock::now();
  do {
    auto t = Clock::now();
    copy_all();
    double s = since(t);
    best = std::max(best, 2.0 * double(bytes) / s / 1e9);
  } while (since(start) < seconds);
  return best;
}

double cpu_gemm_tflops(double seconds) {
  // C[M,N] += A[M,K] B[K,N] per thread on its own cache-resident blocks: a register-blocked 4x16 kernel the
  // compiler vectorises; the rate is the core count times the FMA throughput it achieves.
  constexpr int M = 64, N = 64, K = 256;
  const int threads = hardware_threads();
  std::vector<double> rate(size_t(threads), 0.0);
  parallel_for(threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      std::vector<float> A(size_t(M) * K, 0.5f), B(size_t(K) * N, 0.25f), C(size_t(M) * N, 0.0f);
      uint64_t reps = 0;
      auto start = Clock::now();
      do {
        for (int i = 0; i < M; i += 4)
          for (int j = 0; j < N; j += 16) {
            float acc[4][16] = {};
            for (int k = 0; k < K; ++k)
              for (int ii = 0; ii < 4; ++ii) {
                const float a = A[size_t(i + ii) * K + size_t(k)];
                for (int jj = 0; jj < 16; ++jj) acc[ii][jj] += a * B[size_t(k) * N + size_t(j + jj)];
              }
            for (int ii = 0; ii < 4; ++ii)
              for (int jj = 0; jj < 16; ++jj) C[size_t(i + ii) * N + size_t(j + jj)] += acc[ii][jj];
          }
        ++reps;
      } while (since(start) < seconds);
      volatile float sink = C[0];
      (void)sink;
      rate[size_t(t)] = 2.0 * M * N * K * double(reps) / since(start);
    }
  }, threads);
  double total = 0;
  for (double r : rate) total += r;
  return total / 1e12;
}

namespace {
DeviceLimits cpu_probe(double seconds) {
  DeviceLimits d;
  auto m = machine_info();
  d.device = "CPU: " + m.cpu_model + " (" + std::to_string(m.threads) + " threads)";
  d.copy_gbps = cpu_copy_gbps(seconds / 2);
  d.copy_method = "memcpy of 1 GiB on all threads, best run, bytes read + written";
  d.matmul_tflops = cpu_gemm_tflops(seconds / 2);
  d.matmul_method = "f32 register-blocked GEMM 64x64x256 per thread, all threads";
  if (fast::q4_avx512_available()) {  // the 4-bit kernels multiply-add u8 x s8 with VNNI: that is their limit
    std::vector<double> rate(m.threads, 0.0);
    std::vector<std::thread> ts;
    for (int t = 0; t < m.threads; ++t)
      ts.emplace_back([&rate, t, seconds] { rate[t] = fast::vnni_gops_one_thread(seconds / 4); });
    for (auto& t : ts) t.join();
    double total = 0;
    for (double r : rate) total += r;
    d.matmul_tflops = total / 1e3;
    d.matmul_method = "AVX-512 VNNI vpdpbusd (int8 multiply-add, the 4-bit kernels' instruction) on registers, all threads";
  }
  return d;
}
}  // namespace

LILY_LIMITS_PROBE("cpu", cpu_probe);

#ifdef LILY_HAVE_CUDA
static DeviceLimits cuda_probe(double seconds) {
  CudaLimits c = cuda_probe_limits(seconds);
  DeviceLimits d;
  d.device = "GPU: " + c.device;
  d.copy_gbps = c.copy_gbps;
  d.matmul_tflops = c.matmul_tflops;
  d.copy_method = "cudaMemcpy device-to-device of 2 GiB, best run, bytes read + written";
  d.matmul_method = "cuBLAS bf16 GEMM 8192^3, fp32 accumulate, random data, best run";
  return d;
}
LILY_LIMITS_PROBE("cuda", cuda_probe);
#endif

}  // namespace lily
