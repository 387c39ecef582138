#include "server/response_store.h"

namespace lily {

void ResponseStore::put(const std::string& id, Entry e) {
  std::lock_guard<std::mutex> lk(m_);
  if (map_.insert_or_assign(id, std::move(e)).second) order_.push_back(id);
  while (map_.size() > max_ && !order_.empty()) {
    map_.erase(order_.front());
    order_.pop_front();
  }
  if (order_.size() > 2 * max_ + 16) {  // drop ids erased earlier
    std::deque<std::string> keep;
    for (auto& k : order_)
      if (map_.count(k)) keep.push_back(std::move(k));
    order_.swap(keep);
  }
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lk(m_);
  auto it = map_.find(id);
  if (it == map_.end()) return std::nullopt;
  return it->second;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lk(m_);
  return map_.erase(id) > 0;
}

}  // namespace lily
