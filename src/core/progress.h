// A progress bar on stderr, drawn only when stderr is a terminal. Thread-safe: workers call add().
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace lily {

class Progress {
 public:
  // total: units of work (bytes, tokens, steps); label: shown before the bar.
  Progress(std::string label, uint64_t total);
  ~Progress();  // finishes the line if one was drawn
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(uint64_t n);          // n more units done; redraws at most ~10 times a second
  void set(uint64_t done);       // absolute position
  void update(uint64_t done, uint64_t total);  // absolute position and a (new) total
  void finish();                 // draws 100% and ends the line
  bool enabled() const { return enabled_; }

  static bool stderr_is_tty();

 private:
  void draw(uint64_t done, bool force);
  std::string label_;
  std::atomic<uint64_t> total_;
  std::atomic<uint64_t> done_{0};
  bool enabled_;
  bool finished_ = false;
  std::mutex mu_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace lily
