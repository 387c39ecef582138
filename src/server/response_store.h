// Stored Responses (store: true): each response id maps to the conversation it ended (chat messages,
// without instructions) and its Response object, so a later request can continue it by
// previous_response_id and GET /v1/responses/{id} can return it. The token state of the conversation
// is not kept here: the session cache (prefix snapshots) resumes the continued prompt. Bounded by
// entry count (oldest dropped first); thread-safe.
#pragma once
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace lily {

class ResponseStore {
 public:
  explicit ResponseStore(size_t max_entries = 1024) : max_(max_entries) {}

  struct Entry {
    nlohmann::ordered_json conversation;  // chat messages: the input history plus the reply
    nlohmann::ordered_json response;      // the Response object
  };

  void put(const std::string& id, Entry e);
  std::optional<Entry> get(const std::string& id);
  bool erase(const std::string& id);

 private:
  size_t max_;
  std::mutex m_;
  std::unordered_map<std::string, Entry> map_;
  std::deque<std::string> order_;  // insertion order, oldest first (may hold erased ids)
};

}  // namespace lily
