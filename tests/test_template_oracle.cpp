// Oracle test: Python jinja2 (with transformers' chat-template settings, tests/tools/jinja_oracle.py) renders
// generated conversations for the Qwen3.5 and Qwen3 templates; lily must produce the same bytes, and must fail
// wherever jinja2 fails (raise_exception messages verbatim). Skipped when /usr/bin/python3 lacks jinja2.
#include <gtest/gtest.h>

#include <cstdio>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "core/error.h"

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const fs::path kTests = fs::path(LILY_TEST_DIR);

// Runs the oracle; returns false (and sets *skip) when python3/jinja2 is unavailable.
bool run_oracle(const std::string& args, const fs::path& dir, bool* skip) {
  if (!fs::exists("/usr/bin/python3")) {
    *skip = true;
    return false;
  }
  std::string cmd = "/usr/bin/python3 " + (kTests / "tools" / "jinja_oracle.py").string() + " " + args + " 2>" +
                    (dir / "oracle_err.txt").string();
  int rc = std::system(cmd.c_str());
  if (WIFEXITED(rc) && WEXITSTATUS(rc) == 3) *skip = true;
  return rc == 0;
}

struct Tally {
  int rendered = 0, raised = 0, errors = 0;
};

void compare_generated(const std::string& tmpl_source, const std::string& label, unsigned seed, int count, Tally* tally) {
  fs::path dir = fs::temp_directory_path() / ("lily_oracle_" + label + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  {
    std::ofstream f(dir / "template.jinja", std::ios::binary);
    f << tmpl_source;
  }
  bool skip = false;
  bool ok = run_oracle("gen " + (dir / "template.jinja").string() + " " + std::to_string(seed) + " " +
                           std::to_string(count) + " " + (dir / "cases.json").string(),
                       dir, &skip);
  if (skip) GTEST_SKIP() << "/usr/bin/python3 with jinja2 not available";
  ASSERT_TRUE(ok) << slurp(dir / "oracle_err.txt");
  auto cases = nlohmann::ordered_json::parse(slurp(dir / "cases.json"));
  ASSERT_EQ(cases.size(), static_cast<size_t>(count));
  auto t = lily::ChatTemplate::from_string(tmpl_source);
  for (size_t k = 0; k < cases.size(); ++k) {
    const auto& c = cases[k];
    SCOPED_TRACE(label + " case " + std::to_string(k) + ": " + c["context"].dump());
    std::string out;
    std::string err;
    try {
      out = t.render(c["context"]);
    } catch (const lily::Error& e) {
      err = e.what();
    }
    if (c.contains("rendered")) {
      ++tally->rendered;
      EXPECT_EQ(err, "");
      EXPECT_EQ(out, c["rendered"].get<std::string>());
    } else if (c.contains("raised")) {
      ++tally->raised;
      EXPECT_EQ(err, c["raised"].get<std::string>());
    } else {
      ++tally->errors;
      EXPECT_NE(err, "") << "jinja2 failed with " << c["error"] << " but lily rendered";
    }
  }
  fs::remove_all(dir);
  std::printf("[ %s ] %d rendered identically, %d raised the same error, %d failed in both\n", label.c_str(),
              tally->rendered, tally->raised, tally->errors);
}

}  // namespace

TEST(TemplateOracle, Qwen35GeneratedConversations) {
  Tally t;
  compare_generated(slurp(kTests / "fixtures" / "qwen35-chat" / "Qwen3.5-4B.jinja"), "qwen35", 20240601, 300, &t);
  EXPECT_GE(t.rendered, 200);
  EXPECT_GE(t.raised, 10);
}

TEST(TemplateOracle, Qwen3GeneratedConversations) {
  auto cfg = nlohmann::ordered_json::parse(slurp(kTests / "fixtures" / "qwen3-tokenizer" / "tokenizer_config.json"));
  Tally t;
  compare_generated(cfg["chat_template"].get<std::string>(), "qwen3", 777, 300, &t);
  EXPECT_GE(t.rendered, 250);
}

// The feature cases are also re-rendered live by jinja2, so the checked-in expectations cannot drift from it.
TEST(TemplateOracle, FeatureCasesAgreeWithLiveJinja2) {
  struct FeatureCase {
    const char *name, *tmpl, *ctx, *kind, *expected;
  };
  static const FeatureCase cases[] = {
#include "jinja_feature_cases.inc"
  };
  fs::path dir = fs::temp_directory_path() / ("lily_oracle_features_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  nlohmann::ordered_json in = nlohmann::ordered_json::array();
  for (const auto& c : cases) in.push_back({{"template", c.tmpl}, {"context", nlohmann::ordered_json::parse(c.ctx)}});
  {
    std::ofstream f(dir / "in.json", std::ios::binary);
    f << in.dump();
  }
  bool skip = false;
  bool ok = run_oracle("render " + (dir / "in.json").string() + " " + (dir / "out.json").string(), dir, &skip);
  if (skip) GTEST_SKIP() << "/usr/bin/python3 with jinja2 not available";
  ASSERT_TRUE(ok) << slurp(dir / "oracle_err.txt");
  auto out = nlohmann::ordered_json::parse(slurp(dir / "out.json"));
  ASSERT_EQ(out.size(), std::size(cases));
  for (size_t k = 0; k < out.size(); ++k) {
    SCOPED_TRACE(cases[k].name);
    ASSERT_TRUE(out[k].contains(cases[k].kind));
    if (std::string(cases[k].kind) == "rendered") {
      std::string mine = lily::ChatTemplate::from_string(cases[k].tmpl).render(nlohmann::ordered_json::parse(cases[k].ctx));
      EXPECT_EQ(mine, out[k]["rendered"].get<std::string>());
    }
  }
  fs::remove_all(dir);
}
