// `lily template`: renders a chat template with a JSON context and prints the prompt exactly as rendered.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "cli/registry.h"
#include "core/error.h"

namespace {

int run_template(const lily::Args& a) {
  a.check_known({"model", "template", "input"});
  if (!a.has("input") || (a.has("model") == a.has("template"))) {
    std::fprintf(stderr, "usage: lily template (--model DIR | --template FILE.jinja) --input CTX.json\n");
    return 2;
  }
  auto slurp = [](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw lily::Error("cannot read " + path);
    std::ostringstream ss;
    ss << f.rdbuf();
    return ss.str();
  };
  nlohmann::ordered_json ctx;
  try {
    ctx = nlohmann::ordered_json::parse(slurp(a.get("input")));
  } catch (const nlohmann::json::exception& e) {
    throw lily::Error(a.get("input") + ": invalid JSON: " + e.what());
  }
  lily::ChatTemplate t = a.has("model") ? lily::ChatTemplate::load_for_model(a.get("model"))
                                        : lily::ChatTemplate::from_string(slurp(a.get("template")));
  std::string out = t.render(ctx);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace

LILY_COMMAND("template", "render a chat template: --model DIR | --template F.jinja, --input CTX.json", run_template, {});
