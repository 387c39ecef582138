// A description of the machine for benchmark reports (Linux /proc; fields left empty when unknown).
#pragma once
#include <cstdint>
#include <string>

namespace lily {

struct MachineInfo {
  std::string cpu_model;
  int threads = 0;
  uint64_t memory_bytes = 0;
  std::string hostname;
};

MachineInfo machine_info();

}  // namespace lily
