// The CUDA backend's environment switches (src/cuda/env_switch.h, host code: runs without a GPU).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "cuda/env_switch.h"

using namespace lily;
using namespace lily::cuda;

namespace {

constexpr const char* kVar = "LILY_TEST_ENV_SWITCH";

struct EnvSwitch : ::testing::Test {
  void TearDown() override { unsetenv(kVar); }
  static void set(const char* v) { setenv(kVar, v, 1); }
};

// The error must name the variable and the value it got.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST_F(EnvSwitch, ChoiceIndexDefaultAndError) {
  unsetenv(kVar);
  EXPECT_EQ(env_choice(kVar, {"entry", "rows", "act"}, 1), 1);
  set("");
  EXPECT_EQ(env_choice(kVar, {"entry", "rows", "act"}, 2), 2);
  set("act");
  EXPECT_EQ(env_choice(kVar, {"entry", "rows", "act"}, 0), 2);
  set("entry");
  EXPECT_EQ(env_choice(kVar, {"entry", "rows", "act"}, 2), 0);
  set("Rows");  // exact match only
  const std::string e = error_of([] { env_choice(kVar, {"entry", "rows", "act"}, 0); });
  EXPECT_NE(e.find(kVar), std::string::npos) << e;
  EXPECT_NE(e.find("'Rows'"), std::string::npos) << e;
  EXPECT_NE(e.find("entry, rows, act"), std::string::npos) << e;
}

TEST_F(EnvSwitch, CountRange) {
  unsetenv(kVar);
  EXPECT_EQ(env_count(kVar, 16, 16384, 0), 0);
  set("16");
  EXPECT_EQ(env_count(kVar, 16, 16384, 0), 16);
  set("16384");
  EXPECT_EQ(env_count(kVar, 16, 16384, 0), 16384);
  for (const char* bad : {"15", "16385", "-3", "12x", "x", "4.5"}) {
    set(bad);
    const std::string e = error_of([] { env_count(kVar, 16, 16384, 0); });
    EXPECT_NE(e.find(kVar), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("16..16384"), std::string::npos) << bad << ": " << e;
  }
}

TEST_F(EnvSwitch, OnWithDefault) {
  unsetenv(kVar);
  EXPECT_TRUE(env_on(kVar, true));
  EXPECT_FALSE(env_on(kVar, false));
  for (const char* off : {"0", "off", "false"}) {
    set(off);
    EXPECT_FALSE(env_on(kVar, true)) << off;
  }
  set("1");
  EXPECT_TRUE(env_on(kVar, false));
}

}  // namespace
