// Server counters and gauges, rendered in the Prometheus text exposition format. Thread-safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace lily {

class Metrics {
 public:
  void count_request(const std::string& route, int status);  // every answered HTTP request
  // One finished generation: prompt tokens (cached ones included), prefill work and decode work.
  void count_generation(int prompt_tokens, int cached_tokens, int completion_tokens, double prefill_s,
                        double decode_s);
  // Speculative decoding of one generation: draft tokens proposed and kept, and whether drafting switched itself off.
  void count_mtp(int64_t drafted, int64_t accepted, bool switched_off);
  void count_cancelled() { cancelled_++; }
  void count_rejected() { rejected_++; }

  // Gauges set by their owners.
  std::atomic<int64_t> queue_depth{0};
  std::atomic<int64_t> running{0};
  std::atomic<int64_t> cache_bytes{0};
  std::atomic<int64_t> cache_entries{0};

  std::string render() const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, prefilled_tokens_ = 0, completion_tokens_ = 0;
  uint64_t cache_hits_ = 0, cache_misses_ = 0, generations_ = 0;
  double prefill_s_ = 0, decode_s_ = 0;
  double last_prefill_tps_ = 0, last_decode_tps_ = 0;
  uint64_t mtp_drafted_ = 0, mtp_accepted_ = 0, mtp_off_ = 0;
  std::atomic<uint64_t> cancelled_{0}, rejected_{0};
};

}  // namespace lily
