// `lily <command> --help`: each command's usage line and flags. The table is the one place the flags are
// described; tests/test_cli_help.cpp checks that it lists exactly the flags each command accepts.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

namespace lily {

struct FlagHelp {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder of its value ("N", "DIR", ...); "" for a flag that takes none
  const char* text;   // what it does, with its default
};

struct CommandHelp {
  const char* command;
  const char* usage;  // the line after "usage: lily "
  std::vector<FlagHelp> flags;
};

// The entry of `command`, or null when it has none.
const CommandHelp* find_command_help(const std::string& command);
// Prints "usage: ...", the command's one-line summary and its flags (and -h/--help).
void print_command_help(std::FILE* out, const CommandHelp& h, const char* summary);

}  // namespace lily
