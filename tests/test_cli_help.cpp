// `lily <command> --help`: every command has a help entry that lists exactly the flags the command accepts
// (its check_known list; value-less flags are its bool flags), and the binary prints it with exit status 0.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <set>
#include <string>

#include "cli/args.h"
#include "cli/command_help.h"
#include "cli/registry.h"

using namespace lily;

namespace {

const std::string kLily = std::string(LILY_BUILD_DIR) + "/lily";

// stdout of `cmd` and its exit status
std::pair<std::string, int> run_capture(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {"", -1};
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) out.append(buf.data(), n);
  const int st = pclose(p);
  return {out, WIFEXITED(st) ? WEXITSTATUS(st) : -1};
}

Args parse(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return parse_args(static_cast<int>(argv.size()), argv.data(), {"flag"});
}

}  // namespace

TEST(CliHelp, HelpAndDashHNeverTakeAValue) {
  EXPECT_TRUE(parse({"lily", "bench", "--help"}).has("help"));
  EXPECT_TRUE(parse({"lily", "bench", "-h"}).has("help"));
  const Args a = parse({"lily", "run", "--model", "D", "-h", "--flag"});
  EXPECT_TRUE(a.has("help"));
  EXPECT_EQ(a.get("model"), "D");
  EXPECT_TRUE(a.positional.empty());
  // a value that happens to read "-h" stays a value
  EXPECT_FALSE(parse({"lily", "run", "--prompt=-h"}).has("help"));
  EXPECT_THROW(parse({"lily", "run", "--prompt"}), Error);
}

TEST(CliHelp, EveryCommandDocumentsExactlyTheFlagsItAccepts) {
  ASSERT_FALSE(command_registry().empty());
  for (const Command& c : command_registry()) {
    SCOPED_TRACE(c.name);
    const CommandHelp* h = find_command_help(c.name);
    ASSERT_NE(h, nullptr) << "no entry for '" << c.name << "' in src/cli/command_help.cpp";
    std::set<std::string> documented, valueless;
    for (const FlagHelp& f : h->flags) {
      EXPECT_TRUE(documented.insert(f.name).second) << "--" << f.name << " listed twice";
      if (!*f.value) valueless.insert(f.name);
    }
    EXPECT_EQ(valueless, std::set<std::string>(c.bool_flags.begin(), c.bool_flags.end()))
        << "flags documented without a value must be exactly the command's bool flags";
    // Every command checks its flags first: a flag no command has makes it throw UnknownFlag with its list.
    Args a;
    a.command = c.name;
    a.flags.emplace("no-such-flag-for-the-help-test", "1");
    try {
      c.run(a);
      ADD_FAILURE() << "the command ran with an unknown flag";
    } catch (const UnknownFlag& e) {
      EXPECT_EQ(std::set<std::string>(e.known.begin(), e.known.end()), documented)
          << "the help must list exactly the flags the command accepts";
    } catch (const std::exception& e) {
#ifndef LILY_HAVE_CUDA
      if (std::string(c.name) == "cudabench") continue;  // without CUDA it refuses before reading its flags
#endif
      ADD_FAILURE() << "expected an unknown-flag error, got: " << e.what();
    }
  }
}

TEST(CliHelp, BinaryPrintsEachCommandsFlags) {
  for (const Command& c : command_registry()) {
    SCOPED_TRACE(c.name);
    const CommandHelp* h = find_command_help(c.name);
    ASSERT_NE(h, nullptr);
    for (const char* flag : {"--help", "-h"}) {
      auto [out, rc] = run_capture("'" + kLily + "' " + c.name + " " + flag + " 2>/dev/null");
      EXPECT_EQ(rc, 0) << flag;
      EXPECT_NE(out.find(std::string("usage: lily ") + c.name), std::string::npos) << out;
      for (const FlagHelp& f : h->flags) EXPECT_NE(out.find(std::string("--") + f.name), std::string::npos) << out;
    }
  }
  // help comes before any other check: no model is loaded, no required flag is asked for
  auto [out, rc] = run_capture("'" + kLily + "' serve --port 1 --help 2>&1");
  EXPECT_EQ(rc, 0);
  EXPECT_NE(out.find("--api-key"), std::string::npos) << out;
  auto [sub, src] = run_capture("'" + kLily + "' help run 2>/dev/null");
  EXPECT_EQ(src, 0);
  EXPECT_NE(sub.find("--prompt"), std::string::npos) << sub;
}

TEST(CliHelp, TopLevelHelpListsCommands) {
  for (const char* flag : {"--help", "-h", "help"}) {
    auto [out, rc] = run_capture("'" + kLily + "' " + flag + " 2>/dev/null");
    EXPECT_EQ(rc, 0) << flag;
    for (const Command& c : command_registry())
      EXPECT_NE(out.find(std::string("  ") + c.name + " "), std::string::npos) << c.name << "\n" << out;
  }
  auto [out, rc] = run_capture("'" + kLily + "' no-such-command 2>&1");
  EXPECT_EQ(rc, 2);
  EXPECT_NE(out.find("unknown command 'no-such-command'"), std::string::npos) << out;
}
