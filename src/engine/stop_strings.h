// Stop strings over streamed text: text that might still grow into a stop string is held back, so a stop
// string (or any part of it) is never emitted.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace lily {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);  // empty strings are ignored

  struct Out {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; `text` ends just before it and nothing follows
  };
  // Appends generated text. After a stop, further pushes return nothing.
  Out push(std::string_view text);
  // End of generation: releases the held-back tail (no stop string can complete any more).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& matched() const { return matched_; }  // the stop string that matched ("" before)

 private:
  std::vector<std::string> stops_;
  std::string held_;       // tail that is a prefix of some stop string
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace lily
