// `lily <command> [flags]`: dispatches to the registered sub-commands (src/cli/cmd_*.cpp).
// `lily`, `lily help` and `lily --help` list the commands; `lily help CMD` and `lily CMD --help` (or -h) print
// that command's flags (src/cli/command_help.cpp).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>

#include "cli/command_help.h"
#include "cli/registry.h"
#include "core/error.h"

namespace {

void usage(std::FILE* out) {
  auto cmds = lily::command_registry();
  std::sort(cmds.begin(), cmds.end(), [](const auto& a, const auto& b) { return std::strcmp(a.name, b.name) < 0; });
  std::fprintf(out, "usage: lily <command> [flags]\n\ncommands:\n");
  for (const auto& c : cmds) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'lily <command> --help' lists a command's flags.\n");
}

const lily::Command* find_command(const char* name) {
  for (const auto& c : lily::command_registry())
    if (!std::strcmp(c.name, name)) return &c;
  return nullptr;
}

int command_help(const lily::Command& c) {
  const lily::CommandHelp* h = lily::find_command_help(c.name);
  if (!h) {
    std::printf("usage: lily %s [flags]\n\n%s\n", c.name, c.summary);
    return 0;
  }
  lily::print_command_help(stdout, *h, c.summary);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!std::strcmp(argv[1], "help") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    if (argc > 2) {
      if (const lily::Command* c = find_command(argv[2])) return command_help(*c);
      std::fprintf(stderr, "lily: unknown command '%s'\n\n", argv[2]);
      usage(stderr);
      return 2;
    }
    usage(stdout);
    return 0;
  }
  const lily::Command* c = find_command(argv[1]);
  if (!c) {
    std::fprintf(stderr, "lily: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
  }
  try {
    lily::Args a = lily::parse_args(argc, argv, c->bool_flags);
    if (a.has("help")) return command_help(*c);
    return c->run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lily %s: error: %s\n", c->name, e.what());
    return 1;
  }
}
