// `lily <command> [flags]`: dispatches to the registered sub-commands (src/cli/cmd_*.cpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/registry.h"
#include "core/error.h"

static void usage() {
  auto cmds = lily::command_registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(stderr, "usage: lily <command> [flags]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(stderr, "  %-10s %s\n", c.name, c.summary);
}

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  for (const auto& c : lily::command_registry()) {
    if (std::strcmp(c.name, argv[1]) != 0) continue;
    try {
      lily::Args a = lily::parse_args(argc, argv, c.bool_flags);
      return c.run(a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "lily %s: error: %s\n", c.name, e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "lily: unknown command '%s'\n\n", argv[1]);
  usage();
  return 2;
}
