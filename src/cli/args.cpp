#include "cli/args.h"

#include <cstdlib>

#include "core/error.h"

namespace lily {

std::string Args::get(const std::string& k, const std::string& def) const {
  auto it = flags.find(k);
  return it == flags.end() ? def : it->second;
}

long Args::get_int(const std::string& k, long def) const {
  auto it = flags.find(k);
  if (it == flags.end()) return def;
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end) throw Error("--" + k + " expects an integer, got '" + it->second + "'");
  return v;
}

double Args::get_double(const std::string& k, double def) const {
  auto it = flags.find(k);
  if (it == flags.end()) return def;
  char* end = nullptr;
  double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end) throw Error("--" + k + " expects a number, got '" + it->second + "'");
  return v;
}

void Args::check_known(const std::vector<std::string>& known) const {
  for (const auto& [k, v] : flags) {
    bool ok = false;
    for (const auto& n : known) ok = ok || n == k;
    if (!ok)
      throw UnknownFlag("unknown flag --" + k + " for 'lily " + command + "' (see 'lily " + command + " --help')",
                        known);
  }
}

Args parse_args(int argc, char** argv, const std::vector<std::string>& bool_flags) {
  Args a;
  int i = 1;
  if (i < argc) a.command = argv[i++];
  for (; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "-h" || s == "--help") {
      a.flags.emplace("help", "1");
    } else if (s.rfind("--", 0) == 0 && s.size() > 2) {
      std::string k = s.substr(2), v = "1";
      auto eq = k.find('=');
      bool is_bool = false;
      for (const auto& b : bool_flags) is_bool = is_bool || b == k;
      if (eq != std::string::npos) {
        v = k.substr(eq + 1);
        k = k.substr(0, eq);
      } else if (!is_bool) {
        if (i + 1 >= argc) throw Error("flag --" + k + " needs a value");
        v = argv[++i];
      }
      a.flags[k] = v;
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

}  // namespace lily
