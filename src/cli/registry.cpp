#include "cli/registry.h"

namespace lily {

std::vector<Command>& command_registry() {
  static std::vector<Command> r;
  return r;
}

}  // namespace lily
