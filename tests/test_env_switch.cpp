// The LILY_* variables: the parsers (src/core/env.h), LILY_PROFILE, the retired names, and the CUDA backend's
// options (src/cuda/cuda_options.cpp, host code: runs without a GPU, in every build).
#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "cuda/cuda_options.h"

using namespace lily;
using lily::cuda::CudaOptions;

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

// Sets variables for one scope and restores what they were.
class ScopedVars {
 public:
  ScopedVars(std::initializer_list<std::pair<const char*, const char*>> vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name);
      saved_.push_back({name, old ? std::string(old) : std::string(), old != nullptr});
      setenv(name, value, 1);
    }
  }
  ~ScopedVars() {
    for (const auto& s : saved_) s.had ? setenv(s.name, s.value.c_str(), 1) : unsetenv(s.name);
  }

 private:
  struct Saved {
    const char* name;
    std::string value;
    bool had;
  };
  std::vector<Saved> saved_;
};

TEST(CudaOptionsEnv, DefaultsWhenUnset) {
  for (const char* v : {"LILY_CUDA_LAUNCH", "LILY_PROFILE", "LILY_CUDA_PREFILL", "LILY_CUDA_PREFILL_MAX_CHUNK",
                        "LILY_CUDA_PREFILL_PRECISION", "LILY_CUDA_SAMPLER", "LILY_CUDA_ROUTER_Y", "LILY_CUDA_INT8_X"})
    if (std::getenv(v)) GTEST_SKIP() << v << " is set in the test's environment";
  const CudaOptions o = CudaOptions::from_env();
  EXPECT_TRUE(o.graph);
  EXPECT_TRUE(o.pdl);
  EXPECT_FALSE(o.profile);
  EXPECT_EQ(o.trace, 0);
  EXPECT_TRUE(o.prefill);
  EXPECT_FALSE(o.prefill_simple);
  EXPECT_EQ(o.prefill_max_chunk, 0);
  EXPECT_EQ(o.prefill_prec, 2);  // split (docs/cuda-prefill.md, precision)
  EXPECT_TRUE(o.device_sampler);
  EXPECT_TRUE(o.router_y);
  EXPECT_TRUE(o.int8_x);
}

TEST(CudaOptionsEnv, LaunchModes) {
  struct Case {
    const char* value;
    bool graph, pdl;
  };
  for (const Case& c : {Case{"graph", true, true}, Case{"graph-nopdl", true, false}, Case{"direct", false, true},
                        Case{"direct-nopdl", false, false}}) {
    ScopedVars v({{"LILY_CUDA_LAUNCH", c.value}});
    const CudaOptions o = CudaOptions::from_env();
    EXPECT_EQ(o.graph, c.graph) << c.value;
    EXPECT_EQ(o.pdl, c.pdl) << c.value;
  }
  ScopedVars bad({{"LILY_CUDA_LAUNCH", "0"}});
  const std::string e = error_of([] { CudaOptions::from_env(); });
  EXPECT_NE(e.find("LILY_CUDA_LAUNCH"), std::string::npos) << e;
  EXPECT_NE(e.find("graph, graph-nopdl, direct, direct-nopdl"), std::string::npos) << e;
}

TEST(CudaOptionsEnv, PrefillModes) {
  {
    ScopedVars v({{"LILY_CUDA_PREFILL", "batched"}});
    const CudaOptions o = CudaOptions::from_env();
    EXPECT_TRUE(o.prefill);
    EXPECT_FALSE(o.prefill_simple);
  }
  {
    ScopedVars v({{"LILY_CUDA_PREFILL", "simple"}});
    const CudaOptions o = CudaOptions::from_env();
    EXPECT_TRUE(o.prefill);
    EXPECT_TRUE(o.prefill_simple);
  }
  {
    ScopedVars v({{"LILY_CUDA_PREFILL", "decode"}});
    EXPECT_FALSE(CudaOptions::from_env().prefill);
  }
  for (const char* bad : {"0", "1", "Simple"}) {
    ScopedVars v({{"LILY_CUDA_PREFILL", bad}});
    const std::string e = error_of([] { CudaOptions::from_env(); });
    EXPECT_NE(e.find("LILY_CUDA_PREFILL"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("batched, simple, decode"), std::string::npos) << bad << ": " << e;
  }
  for (const auto& [value, prec] :
       {std::pair{"bf16", 0}, std::pair{"fp16", 1}, std::pair{"split", 2}, std::pair{"mixed", 3}}) {
    ScopedVars v({{"LILY_CUDA_PREFILL_PRECISION", value}});
    EXPECT_EQ(CudaOptions::from_env().prefill_prec, prec) << value;
  }
  {
    ScopedVars v({{"LILY_CUDA_PREFILL_PRECISION", "fp32"}});
    const std::string e = error_of([] { CudaOptions::from_env(); });
    EXPECT_NE(e.find("bf16, fp16, split, mixed"), std::string::npos) << e;
  }
}

TEST(CudaOptionsEnv, ProfileValues) {
  {
    ScopedVars v({{"LILY_PROFILE", "1"}});
    EXPECT_EQ(profile_mode_from_env(), ProfileMode::kPhases);
    const CudaOptions o = CudaOptions::from_env();
    EXPECT_TRUE(o.profile);
    EXPECT_FALSE(o.graph);  // events between the kernels need the ungraphed step
    EXPECT_EQ(o.trace, 0);
  }
  {
    ScopedVars v({{"LILY_PROFILE", "trace"}});
    const CudaOptions o = CudaOptions::from_env();
    EXPECT_FALSE(o.profile);
    EXPECT_TRUE(o.graph);  // stamps are taken inside the graph
    EXPECT_EQ(o.trace, 1);
  }
  {
    ScopedVars v({{"LILY_PROFILE", "trace-blocks"}});
    EXPECT_EQ(CudaOptions::from_env().trace, 2);
  }
  {
    ScopedVars v({{"LILY_PROFILE", "0"}});
    EXPECT_EQ(profile_mode_from_env(), ProfileMode::kOff);
  }
  ScopedVars bad({{"LILY_PROFILE", "yes"}});
  const std::string e = error_of([] { profile_mode_from_env(); });
  EXPECT_NE(e.find("LILY_PROFILE"), std::string::npos) << e;
  EXPECT_NE(e.find("'yes'"), std::string::npos) << e;
}

// An old name is an error that says what to set instead, whatever its value (never silently ignored).
TEST(CudaOptionsEnv, RetiredNamesSayTheNewName) {
  struct Case {
    const char* name;
    const char* value;
    const char* says;
  };
  const Case cases[] = {
      {"LILY_CUDA_GRAPH", "0", "LILY_CUDA_LAUNCH"},     {"LILY_CUDA_PDL", "1", "LILY_CUDA_LAUNCH"},
      {"LILY_CUDA_PROFILE", "1", "LILY_PROFILE=1"},     {"LILY_CUDA_TRACE", "2", "LILY_PROFILE=trace"},
      {"LILY_CUDA_PREFILL_SIMPLE", "1", "LILY_CUDA_PREFILL=simple"},
  };
  for (const Case& c : cases) {
    ScopedVars v({{c.name, c.value}});
    for (const std::string& e : {error_of([] { reject_retired_env(); }), error_of([] { CudaOptions::from_env(); })}) {
      EXPECT_NE(e.find(std::string(c.name) + "=" + c.value), std::string::npos) << c.name << ": " << e;
      EXPECT_NE(e.find("retired"), std::string::npos) << c.name << ": " << e;
      EXPECT_NE(e.find(c.says), std::string::npos) << c.name << ": " << e;
    }
  }
  EXPECT_EQ(error_of([] { reject_retired_env(); }), "");
}

}  // namespace
