// The one exception type: its message names what was wrong (file, tensor, expected, actual).
#pragma once
#include <stdexcept>
#include <string>

namespace lily {

struct Error : std::runtime_error {
  explicit Error(const std::string& m) : std::runtime_error(m) {}
};

}  // namespace lily
