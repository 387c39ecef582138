// Pure helpers of the benchmark protocol (bench_runner.h): deterministic prompt ids, the 64-token digest,
// sample statistics, argmax.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lily {

// Prompt id i: ((i * 2654435761) mod 2^32) mod vocab.
int32_t bench_prompt_id(int64_t i, int vocab);
std::vector<int32_t> bench_prompt(int n, int vocab);

// FNV-1a (64-bit) over the ids' little-endian 4-byte encodings; printed as 16 hex digits.
uint64_t fnv1a_ids(const std::vector<int32_t>& ids);
std::string hex64(uint64_t v);

struct SampleStats {
  double median = 0, min = 0, max = 0;
  int n = 0;
};
SampleStats sample_stats(std::vector<double> v);  // median of an even count = mean of the middle two

int argmax(const float* x, int n);  // first index of the maximum

// "256,1K,4K" or "256,1024": K = 1024 (case-insensitive). Throws lily::Error on junk or values < 1.
std::vector<int> parse_length_list(const std::string& s);
std::string length_label(int n);  // 1024 -> "1K", 1536 -> "1536"

}  // namespace lily
