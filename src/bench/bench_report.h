// Benchmark results as JSON (the machine-readable record) and as a text table.
//
// JSON (schema "lily-bench-1"): machine {cpu_model, threads, memory_bytes, hostname, gpu}, backend,
// model {label, layout, weight_bytes, active_params, layers, vocab}, protocol {...}, limits (or null),
// prefill [{length, samples_s, tok_s {median,min,max}, tflops, fraction_of_limit}],
// decode [{context, samples_s, tok_s {...}, bytes_per_token {...}, gbps, fraction_of_limit, digest, digests,
// digest_consistent}], digests_consistent.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_runner.h"
#include "bench/device_limits.h"
#include "model/weights.h"

namespace lily {

struct BenchContext {
  std::string backend;
  std::string model_label;
  const ModelWeights* weights = nullptr;
  int kv_elem_bytes = 4;
  std::optional<DeviceLimits> limits;
  BenchOptions options;
};

nlohmann::ordered_json limits_json(const DeviceLimits& d);
nlohmann::ordered_json bench_json(const BenchContext& ctx, const std::vector<BenchLengthResult>& results);
std::string bench_table(const nlohmann::ordered_json& j);

}  // namespace lily
