#include "engine/stop_strings.h"

#include <algorithm>

namespace lily {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopMatcher::Out StopMatcher::push(std::string_view text) {
  Out o;
  if (stopped_) return o;
  held_.append(text);
  if (stops_.empty()) {
    o.text.swap(held_);
    return o;
  }
  // Earliest complete match wins.
  size_t cut = std::string::npos;
  for (const auto& s : stops_)
    if (size_t at = held_.find(s); at < cut) {
      cut = at;
      matched_ = s;
    }
  if (cut != std::string::npos) {
    o.text = held_.substr(0, cut);
    o.stopped = stopped_ = true;
    held_.clear();
    return o;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const auto& s : stops_) {
    size_t maxk = std::min(s.size() - 1, held_.size());
    for (size_t k = maxk; k > hold; --k)
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  }
  o.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return o;
}

std::string StopMatcher::flush() {
  std::string t;
  if (!stopped_) t.swap(held_);
  held_.clear();
  return t;
}

}  // namespace lily
