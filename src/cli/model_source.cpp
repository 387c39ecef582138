#include "cli/model_source.h"

#include <cstdio>

namespace lily {

std::string demo_model_dir() {
#ifdef LILY_SOURCE_DIR
  return std::string(LILY_SOURCE_DIR) + "/demo/tiny-model";
#else
  return "demo/tiny-model";
#endif
}

std::string model_dir_or_demo(const Args& a) {
  if (a.has("model")) return a.get("model");
  std::fprintf(stderr,
               "lily: no --model given: running the bundled tiny DEMO model (random weights, 4 layers).\n"
               "lily: its output is meaningless noise; pass --model DIR with a Qwen3.6-35B-A3B checkpoint.\n");
  return demo_model_dir();
}

}  // namespace lily
