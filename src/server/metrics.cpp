#include "server/metrics.h"

#include <sstream>

namespace lily {

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> g(m_);
  requests_[{route, status}]++;
}

void Metrics::count_generation(int prompt_tokens, int cached_tokens, int completion_tokens, double prefill_s,
                               double decode_s) {
  std::lock_guard<std::mutex> g(m_);
  generations_++;
  prompt_tokens_ += prompt_tokens;
  cached_tokens_ += cached_tokens;
  const int prefilled = prompt_tokens - cached_tokens;
  prefilled_tokens_ += prefilled;
  completion_tokens_ += completion_tokens;
  (cached_tokens > 0 ? cache_hits_ : cache_misses_)++;
  prefill_s_ += prefill_s;
  decode_s_ += decode_s;
  if (prefill_s > 0 && prefilled > 0) last_prefill_tps_ = prefilled / prefill_s;
  if (decode_s > 0 && completion_tokens > 0) last_decode_tps_ = completion_tokens / decode_s;
}

void Metrics::count_mtp(int64_t drafted, int64_t accepted, bool switched_off) {
  std::lock_guard<std::mutex> g(m_);
  mtp_drafted_ += static_cast<uint64_t>(drafted);
  mtp_accepted_ += static_cast<uint64_t>(accepted);
  mtp_off_ += switched_off ? 1 : 0;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> g(m_);
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, auto value) {
    o << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n' << name << ' ' << value << '\n';
  };
  o << "# HELP lily_requests_total HTTP requests answered, by route and status.\n# TYPE lily_requests_total counter\n";
  for (const auto& [k, v] : requests_)
    o << "lily_requests_total{route=\"" << k.first << "\",code=\"" << k.second << "\"} " << v << '\n';
  metric("lily_generations_total", "counter", "Generations run to completion.", generations_);
  metric("lily_prompt_tokens_total", "counter", "Prompt tokens of finished generations (cached included).", prompt_tokens_);
  metric("lily_prefill_tokens_total", "counter", "Prompt tokens actually run through the model.", prefilled_tokens_);
  metric("lily_cached_tokens_total", "counter", "Prompt tokens resumed from the session cache.", cached_tokens_);
  metric("lily_completion_tokens_total", "counter", "Generated tokens.", completion_tokens_);
  metric("lily_cache_hits_total", "counter", "Generations that resumed from a session-cache snapshot.", cache_hits_);
  metric("lily_cache_misses_total", "counter", "Generations that prefilled from scratch.", cache_misses_);
  metric("lily_prefill_seconds_total", "counter", "Time spent in prefill.", prefill_s_);
  metric("lily_decode_seconds_total", "counter", "Time spent decoding.", decode_s_);
  metric("lily_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation.", last_prefill_tps_);
  metric("lily_decode_tokens_per_second", "gauge", "Decode speed of the last generation.", last_decode_tps_);
  metric("lily_mtp_draft_tokens_total", "counter", "Draft tokens proposed by the MTP block (speculative decoding).",
         mtp_drafted_);
  metric("lily_mtp_accepted_tokens_total", "counter", "Draft tokens accepted by verification.", mtp_accepted_);
  metric("lily_mtp_switched_off_total", "counter", "Generations whose drafting stopped because it did not pay.",
         mtp_off_);
  metric("lily_requests_cancelled_total", "counter", "Generations cancelled (client gone or shutdown).", cancelled_.load());
  metric("lily_requests_rejected_total", "counter", "Requests refused because the queue was full.", rejected_.load());
  metric("lily_queue_depth", "gauge", "Requests waiting for the inference thread.", queue_depth.load());
  metric("lily_requests_running", "gauge", "Requests being generated.", running.load());
  metric("lily_cache_bytes", "gauge", "Bytes held by session-cache snapshots.", cache_bytes.load());
  metric("lily_cache_entries", "gauge", "Session-cache snapshots.", cache_entries.load());
  return o.str();
}

}  // namespace lily
