// `lily logits` end to end (the real executable): both tiny checkpoints reproduce the transformers reference
// through the command's output file — prompt logits and the greedy continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "io/safetensors.h"

using namespace lily;

namespace {

template <class T>
std::vector<T> read(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) return {};
  const T* p = static_cast<const T*>(t->data);
  return std::vector<T>(p, p + t->nbytes / sizeof(T));
}

void check_layout(const std::string& layout, const std::string& backend, double tol) {
  const std::string base = std::string(LILY_TEST_DIR) + "/fixtures/tiny/";
  auto ref = SafetensorsFile::open(base + "reference-" + layout + ".safetensors");
  auto ids = read<int32_t>(*ref, "prompt_ids");
  std::string list;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) list += ',';
    list += std::to_string(ids[i]);
  }
  const std::string out = (std::filesystem::temp_directory_path() / ("lily_logits_" + layout + "_" + backend + ".st")).string();
  const std::string cmd = std::string(LILY_BUILD_DIR) + "/lily logits --model " + base + "model-" + layout +
                          " --backend " + backend + " --ids " + list + " --decode 24 --prefill-chunk 7 --out " + out +
                          " 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto got = SafetensorsFile::open(out);
  for (const char* name : {"prompt_logits", "greedy_logits"}) {
    auto a = read<float>(*got, name), b = read<float>(*ref, name);
    ASSERT_EQ(a.size(), b.size()) << name;
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_FALSE(std::isnan(a[i]));
      m = std::max(m, std::fabs(double(a[i]) - b[i]));
    }
    std::printf("[ lily logits %s %s ] %s max |dlogit| %.3g\n", layout.c_str(), backend.c_str(), name, m);
    EXPECT_LE(m, tol) << name;
  }
  EXPECT_EQ(read<int32_t>(*got, "greedy_ids"), read<int32_t>(*ref, "greedy_ids"));
  EXPECT_EQ(read<int32_t>(*got, "prompt_ids"), ids);
  std::filesystem::remove(out);
}

}  // namespace

TEST(CliLogits, TinyBf16MatchesReference) { check_layout("bf16", "cpu-ref", 1e-3); }
TEST(CliLogits, TinyMlx4bitMatchesReference) { check_layout("mlx-4bit", "cpu-ref", 1e-3); }
TEST(CliLogits, BadIdsAreAnError) {
  const std::string cmd = std::string(LILY_BUILD_DIR) + "/lily logits --model " + LILY_TEST_DIR +
                          "/fixtures/tiny/model-bf16 --ids 1,x,3 --out /tmp/never.st 2>/dev/null";
  EXPECT_NE(std::system(cmd.c_str()), 0);
}
