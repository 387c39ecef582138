// `lily tokenize` through the command registry.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "cli/registry.h"
#include "core/error.h"

using namespace lily;

namespace {

std::string run_cmd(std::vector<std::string> argv) {
  const Command* cmd = nullptr;
  for (const auto& c : command_registry())
    if (!std::strcmp(c.name, "tokenize")) cmd = &c;
  if (!cmd) throw std::runtime_error("tokenize command not registered");
  argv.insert(argv.begin(), {"lily", "tokenize"});
  std::vector<char*> ptrs;
  for (auto& s : argv) ptrs.push_back(s.data());
  Args a = parse_args(static_cast<int>(ptrs.size()), ptrs.data(), cmd->bool_flags);
  testing::internal::CaptureStdout();
  try {
    cmd->run(a);
  } catch (...) {
    std::fflush(stdout);
    testing::internal::GetCapturedStdout();
    throw;
  }
  std::fflush(stdout);
  return testing::internal::GetCapturedStdout();
}

}  // namespace

TEST(TokCli, EncodeAndDecode) {
  const std::string dir = LILY_TEST_DIR "/fixtures/tiny/model-bf16";
  EXPECT_EQ(run_cmd({"--model", dir, "--text", "Hello, world!<|im_end|>"}), "[39,1562,334,11,1351,554,0,4098]\n");
  EXPECT_EQ(run_cmd({"--tokenizer", dir + "/tokenizer.json", "--decode", "39,1562,334,11"}), "Hello,\n");
}

TEST(TokCli, ErrorsNameTheProblem) {
  try {
    run_cmd({"--model", "/no/such/dir", "--text", "x"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/no/such/dir/tokenizer.json"), std::string::npos);
  }
  EXPECT_THROW(run_cmd({"--model", LILY_TEST_DIR "/fixtures/tiny", "--decode", "1,,2"}), Error);
  EXPECT_THROW(run_cmd({"--model", LILY_TEST_DIR "/fixtures/tiny", "--decode", "99999999"}), Error);
  EXPECT_THROW(run_cmd({"--model", LILY_TEST_DIR "/fixtures/tiny"}), Error);
}
