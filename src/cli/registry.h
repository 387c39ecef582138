// Sub-command registry: each src/cli/cmd_<name>.cpp registers itself with LILY_COMMAND, so adding a command
// touches no shared file. (lilycore is an OBJECT library, so the registrars are always linked in.)
#pragma once
#include <string>
#include <vector>

#include "cli/args.h"

namespace lily {

struct Command {
  const char* name;
  const char* summary;                 // one line for `lily help`
  int (*run)(const Args& a);           // returns the exit status
  std::vector<std::string> bool_flags; // flags that take no value
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command c) { command_registry().push_back(std::move(c)); }
};

}  // namespace lily

#define LILY_CAT2(a, b) a##b
#define LILY_CAT(a, b) LILY_CAT2(a, b)
#define LILY_COMMAND(...) static ::lily::CommandRegistrar LILY_CAT(lily_cmd_, __LINE__)(::lily::Command{__VA_ARGS__})
