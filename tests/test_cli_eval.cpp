// `lily eval` end to end (the real executable) on the tiny MLX 4-bit fixture: the figures it prints, the JSON, and
// the bounds: met gives exit 0, missed gives exit 1 with each missed bound named with its figure; bad bound
// values are errors naming the flag.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

struct EvalRun {
  int status = -1;
  std::string out;  // stdout and stderr
};

EvalRun eval(const std::string& flags) {
  const std::string base = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
  static int calls = 0;  // one file per call and process: ctest runs the tests of this file side by side
  const std::string log = (std::filesystem::temp_directory_path() /
                           ("lily_eval_cli_" + std::to_string(getpid()) + "_" + std::to_string(calls++) + ".txt"))
                              .string();
  const std::string cmd = std::string(LILY_BUILD_DIR) + "/lily eval --model " + base + "model-mlx-4bit --ref " + base +
                          "reference-mlx-4bit.safetensors --backend cpu " + flags + " > " + log + " 2>&1";
  EvalRun r;
  const int st = std::system(cmd.c_str());
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  r.out = ss.str();
  std::filesystem::remove(log);
  return r;
}

TEST(CliEval, PrintsTheFiguresAndHoldsBoundsThatAreMet) {
  const std::string json =
      (std::filesystem::temp_directory_path() / ("lily_eval_cli_" + std::to_string(getpid()) + ".json")).string();
  EvalRun r = eval("--min-top1 0.99 --max-mean-kl 1e-3 --max-abs 0.5 --json " + json);
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* s : {"top-1 agreement", "max |dlogit|", "KL(ref||ours)    mean", "prefill chunk 512"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  std::ifstream f(json);
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["pass"], true);
  EXPECT_EQ(j["non_finite"], 0);
  EXPECT_EQ(j["prefill_chunk"], 512);
  EXPECT_GE(j["top1_agreement"].get<double>(), 0.99);
  std::filesystem::remove(json);
}

TEST(CliEval, NamesEachMissedBound) {
  EvalRun r = eval("--min-top1 0.5 --max-mean-kl 1e-30 --max-abs 1e-9");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(r.out.find("bound not met: top-1"), std::string::npos) << r.out;  // top-1 >= 0.5 is met
  EXPECT_NE(r.out.find("bound not met: mean KL "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("> --max-mean-kl 1e-30"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bound not met: max |dlogit| "), std::string::npos) << r.out;
  EvalRun k = eval("--max-kl 1e-30");  // the other name of --max-mean-kl
  EXPECT_EQ(k.status, 1) << k.out;
  EXPECT_NE(k.out.find("bound not met: mean KL "), std::string::npos) << k.out;
}

TEST(CliEval, BadBoundsAreErrors) {
  EvalRun a = eval("--min-top1 1.5");
  EXPECT_NE(a.status, 0);
  EXPECT_NE(a.out.find("--min-top1 must be between 0 and 1"), std::string::npos) << a.out;
  EvalRun b = eval("--max-kl 1 --max-mean-kl 1");
  EXPECT_NE(b.status, 0);
  EXPECT_NE(b.out.find("pass one"), std::string::npos) << b.out;
  EvalRun c = eval("--max-abs -1");
  EXPECT_NE(c.status, 0);
  EXPECT_NE(c.out.find("--max-abs must be >= 0"), std::string::npos) << c.out;
}

}  // namespace
