#include "bench/machine_info.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "core/parallel.h"

namespace lily {

MachineInfo machine_info() {
  MachineInfo m;
  m.threads = hardware_threads();
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) m.cpu_model = line.substr(p + 2);
      break;
    }
  }
  std::ifstream mem("/proc/meminfo");
  for (std::string line; std::getline(mem, line);) {
    if (line.rfind("MemTotal:", 0) == 0) {
      m.memory_bytes = std::stoull(line.substr(9)) * 1024;  // "MemTotal:  24000000 kB"
      break;
    }
  }
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) == 0) m.hostname = host;
  return m;
}

}  // namespace lily
