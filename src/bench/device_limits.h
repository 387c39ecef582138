// Measured limits of the device a backend runs on: sustained copy bandwidth and matrix FLOP rate. The CPU
// probes live here; another backend (CUDA) registers its own probe in the table with LILY_LIMITS_PROBE, so
// bench needs no change when it lands.
#pragma once
#include <string>
#include <vector>

namespace lily {

struct DeviceLimits {
  std::string device;        // e.g. "CPU: Intel Xeon ... (2 threads)" or a GPU name
  double copy_gbps = 0;      // bytes read + written per second / 1e9
  double matmul_tflops = 0;  // sustained FLOP/s / 1e12
  std::string copy_method, matmul_method;
};

struct LimitsProbe {
  const char* backend_prefix;          // backend names starting with this use the probe ("cpu", "cuda")
  DeviceLimits (*probe)(double seconds);  // runs for about `seconds` in total
};

std::vector<LimitsProbe>& limits_probes();
struct LimitsProbeRegistrar {
  explicit LimitsProbeRegistrar(LimitsProbe p) { limits_probes().push_back(p); }
};

// The probe for `backend_name` (longest matching prefix); throws lily::Error when none is registered.
DeviceLimits probe_device_limits(const std::string& backend_name, double seconds);

// CPU probes (all hardware threads): multi-threaded memcpy of a 1 GiB buffer; blocked f32 GEMM.
double cpu_copy_gbps(double seconds, size_t bytes = size_t(1) << 30);
double cpu_gemm_tflops(double seconds);

}  // namespace lily

#define LILY_LIMITS_CAT2(a, b) a##b
#define LILY_LIMITS_CAT(a, b) LILY_LIMITS_CAT2(a, b)
#define LILY_LIMITS_PROBE(...) \
  static ::lily::LimitsProbeRegistrar LILY_LIMITS_CAT(lily_limits_, __LINE__)(::lily::LimitsProbe{__VA_ARGS__})
