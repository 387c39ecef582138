// Minimal command-line flags: --name value, --flag, positional words. Unknown flags are reported by the command.
// `--help` and `-h` never take a value: both set flags["help"] (main prints the command's help then).
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace lily {

// Thrown by Args::check_known: names the flag and carries the command's accepted flags (the help test reads them).
struct UnknownFlag : Error {
  UnknownFlag(const std::string& msg, std::vector<std::string> known_flags)
      : Error(msg), known(std::move(known_flags)) {}
  std::vector<std::string> known;
};

struct Args {
  std::string command;
  std::map<std::string, std::string> flags;   // "--model DIR" -> flags["model"] = "DIR"; bare "--x" -> "1"
  std::vector<std::string> positional;

  bool has(const std::string& k) const { return flags.count(k) != 0; }
  std::string get(const std::string& k, const std::string& def = "") const;
  long get_int(const std::string& k, long def) const;      // throws lily::Error on a non-number
  double get_double(const std::string& k, double def) const;
  // Throws lily::UnknownFlag naming the first flag not in `known`.
  void check_known(const std::vector<std::string>& known) const;
};

// Flags listed in `bool_flags` take no value.
Args parse_args(int argc, char** argv, const std::vector<std::string>& bool_flags);

}  // namespace lily
