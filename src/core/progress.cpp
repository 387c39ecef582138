#include "core/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lily {

bool Progress::stderr_is_tty() { return isatty(STDERR_FILENO) == 1; }

Progress::Progress(std::string label, uint64_t total)
    : label_(std::move(label)), total_(total), enabled_(stderr_is_tty()) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

Progress::~Progress() {
  if (enabled_ && !finished_) {
    std::lock_guard<std::mutex> lk(mu_);
    std::fputc('\n', stderr);
  }
}

void Progress::add(uint64_t n) {
  uint64_t d = done_.fetch_add(n) + n;
  if (enabled_) draw(d, false);
}

void Progress::set(uint64_t done) {
  done_.store(done);
  if (enabled_) draw(done, false);
}

void Progress::update(uint64_t done, uint64_t total) {
  total_.store(total);
  set(done);
}

void Progress::finish() {
  if (!enabled_ || finished_) return;
  draw(total_.load(), true);
  std::lock_guard<std::mutex> lk(mu_);
  std::fputc('\n', stderr);
  finished_ = true;
}

void Progress::draw(uint64_t done, bool force) {
  auto now = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lk(mu_, std::try_to_lock);
  if (!lk.owns_lock() && !force) return;
  if (!lk.owns_lock()) lk.lock();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  const uint64_t total = total_.load();
  double frac = total ? double(done) / double(total) : 1.0;
  if (frac > 1) frac = 1;
  constexpr int kWidth = 30;
  int filled = int(frac * kWidth);
  char bar[kWidth + 1];
  for (int i = 0; i < kWidth; ++i) bar[i] = i < filled ? '#' : '.';
  bar[kWidth] = 0;
  double secs = std::chrono::duration<double>(now - start_).count();
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %6.1fs", label_.c_str(), bar, frac * 100.0, secs);
  std::fflush(stderr);
}

}  // namespace lily
