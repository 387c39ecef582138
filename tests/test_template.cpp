// ChatTemplate: the Qwen3.5 golden renders, finding a model directory's template, and the `lily template` CLI.
#include <gtest/gtest.h>

#include <cstdio>
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

void spit(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("lily_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const fs::path kFixtures = fs::path(LILY_TEST_DIR) / "fixtures";

}  // namespace

TEST(TemplateQwen35, GoldenRendersAreByteIdentical) {
  auto t = lily::ChatTemplate::from_string(slurp(kFixtures / "qwen35-chat" / "Qwen3.5-4B.jinja"));
  auto cases = nlohmann::ordered_json::parse(slurp(kFixtures / "qwen35-chat" / "qwen35_template_renders.json"));
  ASSERT_EQ(cases.size(), 8u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    if (c.contains("rendered")) {
      EXPECT_EQ(t.render(c["context"]), c["rendered"].get<std::string>());
    } else {
      try {
        t.render(c["context"]);
        ADD_FAILURE() << "expected error " << c["error"];
      } catch (const lily::Error& e) {
        EXPECT_EQ(std::string(e.what()), c["error"].get<std::string>());
      }
    }
  }
}

TEST(TemplateLoad, FromTokenizerConfigWithSpecialTokens) {
  auto t = lily::ChatTemplate::load_for_model((kFixtures / "qwen3-tokenizer").string());
  nlohmann::ordered_json ctx = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"add_generation_prompt", true}};
  EXPECT_EQ(t.render(ctx), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // eos_token comes from tokenizer_config.json; bos_token is null there, so undefined.
  fs::path d = temp_dir("tokcfg");
  auto cfg = nlohmann::ordered_json::parse(slurp(kFixtures / "qwen3-tokenizer" / "tokenizer_config.json"));
  cfg["chat_template"] = "[{{ eos_token }}|{{ bos_token is defined }}]";
  spit(d / "tokenizer_config.json", cfg.dump());
  EXPECT_EQ(lily::ChatTemplate::load_for_model(d.string()).render({{"messages", nlohmann::ordered_json::array()}}),
            "[<|im_end|>|False]");
  // Context keys override the tokenizer's.
  EXPECT_EQ(lily::ChatTemplate::load_for_model(d.string()).render({{"eos_token", "E"}}), "[E|False]");
  fs::remove_all(d);
}

TEST(TemplateLoad, PrefersJinjaFileThenJsonThenNamedList) {
  fs::path d = temp_dir("load");
  EXPECT_THROW(lily::ChatTemplate::load_for_model(d.string()), lily::Error);
  nlohmann::ordered_json cfg = {{"eos_token", {{"content", "<eos>"}, {"lstrip", false}}},
                                {"chat_template", nlohmann::ordered_json::array({
                                                      {{"name", "tool_use"}, {"template", "tools"}},
                                                      {{"name", "default"}, {"template", "default {{ eos_token }}"}},
                                                  })}};
  spit(d / "tokenizer_config.json", cfg.dump());
  EXPECT_EQ(lily::ChatTemplate::load_for_model(d.string()).render(nlohmann::ordered_json::object()), "default <eos>");
  spit(d / "chat_template.json", R"({"chat_template": "from json"})");
  EXPECT_EQ(lily::ChatTemplate::load_for_model(d.string()).render(nlohmann::ordered_json::object()), "from json");
  spit(d / "chat_template.jinja", "from jinja\n");
  EXPECT_EQ(lily::ChatTemplate::load_for_model(d.string()).render(nlohmann::ordered_json::object()), "from jinja");
  spit(d / "chat_template.jinja", "{% if %}");
  EXPECT_THROW(lily::ChatTemplate::load_for_model(d.string()), lily::Error);
  fs::remove_all(d);
}

TEST(TemplateCli, PrintsPromptExactlyAndFailsOnTemplateErrors) {
  fs::path d = temp_dir("cli");
  fs::path lily = fs::path(LILY_BUILD_DIR) / "lily";
  if (!fs::exists(lily)) GTEST_SKIP() << "lily binary not built";
  spit(d / "ctx.json", R"({"messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true, "enable_thinking": false})");
  std::string cmd = lily.string() + " template --template " + (kFixtures / "qwen35-chat" / "Qwen3.5-4B.jinja").string() +
                    " --input " + (d / "ctx.json").string() + " > " + (d / "out.txt").string() + " 2>" + (d / "err.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(d / "err.txt");
  EXPECT_EQ(slurp(d / "out.txt"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  cmd = lily.string() + " template --model " + (kFixtures / "qwen3-tokenizer").string() + " --input " +
        (d / "ctx.json").string() + " > " + (d / "out.txt").string() + " 2>" + (d / "err.txt").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << slurp(d / "err.txt");
  EXPECT_EQ(slurp(d / "out.txt"), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  spit(d / "ctx.json", R"({"messages": [{"role": "system", "content": "S"}]})");
  cmd = lily.string() + " template --template " + (kFixtures / "qwen35-chat" / "Qwen3.5-4B.jinja").string() +
        " --input " + (d / "ctx.json").string() + " > " + (d / "out.txt").string() + " 2>" + (d / "err.txt").string();
  EXPECT_NE(std::system(cmd.c_str()), 0);
  EXPECT_NE(slurp(d / "err.txt").find("No user query found in messages."), std::string::npos);
  EXPECT_EQ(slurp(d / "out.txt"), "");
  fs::remove_all(d);
}
