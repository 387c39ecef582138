#include "bench/bench_math.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"

namespace lily {

int32_t bench_prompt_id(int64_t i, int vocab) {
  uint64_t h = (uint64_t(i) * 2654435761ull) & 0xFFFFFFFFull;
  return int32_t(h % uint64_t(vocab));
}

std::vector<int32_t> bench_prompt(int n, int vocab) {
  std::vector<int32_t> ids(size_t(n > 0 ? n : 0));
  for (int i = 0; i < n; ++i) ids[size_t(i)] = bench_prompt_id(i, vocab);
  return ids;
}

uint64_t fnv1a_ids(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    uint32_t u = uint32_t(id);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xFF)) * 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)v);
  return buf;
}

SampleStats sample_stats(std::vector<double> v) {
  SampleStats s;
  s.n = int(v.size());
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  size_t m = v.size() / 2;
  s.median = v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

int argmax(const float* x, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;
  return best;
}

std::vector<int> parse_length_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    long mult = 1;
    if (item.back() == 'K' || item.back() == 'k') {
      mult = 1024;
      item.pop_back();
    }
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end || v < 1 || v * mult > (1L << 30))
      throw Error("bad length '" + item + "' in list '" + s + "' (expected e.g. 256,1K,4096)");
    out.push_back(int(v * mult));
  }
  if (out.empty()) throw Error("empty length list '" + s + "'");
  return out;
}

std::string length_label(int n) { return n >= 1024 && n % 1024 == 0 ? std::to_string(n / 1024) + "K" : std::to_string(n); }

}  // namespace lily
