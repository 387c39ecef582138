// lily against llama.cpp itself (tests/fixtures/gguf-llama, made by tools/llama_ref/make_refs.py; see
// docs/gguf.md). The files are llama.cpp's: its converter's BF16/F16 output (re-created here by the test
// conversion and checked tensor by tensor against the converter's checksums, so 12 MB of weights need not be
// committed), llama-quantize's Q4_0 / Q4_K_M / Q5_K_M mixes of it (committed), and a `lily synth --gguf`
// small-preset file (Q4_K/Q6_K/Q8_0 blocks; re-created and checked the same way).
//
// Bounds. llama.cpp's CPU matrix products convert the activations to the weights' dot type first (q8_0 or
// q8_1 blocks of 32 for Q4_0..Q8_0 weights, q8_K blocks of 256 for K-quants, bf16/f16 for BF16/F16 weights);
// lily's reference path keeps them in f32. So each file's logits are also dumped from llama.cpp on its "F32
// twin" (the same weights decoded to F32, where llama.cpp computes in f32 too):
//   - lily vs llama.cpp's twin: the same weights in f32 on both sides: top-1 equal, max |dlogit| <= 1e-3
//     (the bound the transformers comparisons use);
//   - lily vs llama.cpp on the file: within 1.5 x llama.cpp's own file-vs-twin difference (what its
//     activation conversion moves the logits) + 1e-3, and top-1 equal wherever llama.cpp's top two are
//     further apart than that difference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "gguf_convert_util.h"
#include "io/gguf.h"
#include "io/safetensors.h"
#include "loader_test_util.h"
#include "model/weights.h"
#include "synth/gguf_checkpoint.h"
#include "synth/presets.h"
#include "synth/synth_tokenizer.h"
#include "synth/synthetic_model.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

const std::string kDir = std::string(LILY_TEST_DIR) + "/fixtures/gguf-llama";
const std::string kTiny = std::string(LILY_TEST_DIR) + "/fixtures/tiny/model-bf16";

const nlohmann::json& manifest() {
  static const nlohmann::json m = nlohmann::json::parse(read_text(kDir + "/manifest.json"));
  return m;
}

uint64_t fnv1a64(const uint8_t* p, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h;
}

// Every tensor of `path` has the type, shape and data checksum the manifest records for llama.cpp's file.
void expect_manifest_tensors(const std::string& path, const std::string& name) {
  const nlohmann::json& want = manifest().at("files").at(name).at("tensors");
  GgufModel m(path);
  EXPECT_EQ(m.names().size(), want.size()) << name;
  for (const auto& t : want) {
    const std::string tn = t.at("name");
    const GgufTensor* g = m.find(tn);
    ASSERT_NE(g, nullptr) << name << ": tensor " << tn << " missing";
    EXPECT_EQ(ggml_type_name(g->type), t.at("type").get<std::string>()) << name << ": " << tn;
    EXPECT_EQ(g->shape(), t.at("shape").get<std::vector<int64_t>>()) << name << ": " << tn;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a64(g->data, g->nbytes));
    EXPECT_EQ(std::string(hex), t.at("fnv1a64").get<std::string>())
        << name << ": data of " << tn << " differs from llama.cpp's file (if the writer changed on purpose, remake "
        << "the fixture: docs/gguf.md)";
  }
}

// The file a variant's logits were dumped from: committed, or re-created here.
std::string variant_file(const std::string& name, const TempDir& d) {
  const nlohmann::json& f = manifest().at("files").at(name);
  if (f.at("committed").get<bool>()) return kDir + "/" + name + ".gguf";
  const std::string out = d / (name + ".gguf");
  if (name == "tiny-bf16" || name == "tiny-f16" || name == "tiny-bf16-fused") {
    convert_tiny_to_gguf(kTiny, out, {name == "tiny-f16" ? GgmlType::F16 : GgmlType::BF16, false,
                                      name == "tiny-bf16-fused"});
  } else if (name == "synth-small") {
    const nlohmann::json& s = manifest().at("synth");
    const std::string preset = s.at("preset");
    auto w = make_synthetic(preset, s.at("seed").get<uint64_t>());
    write_gguf_checkpoint(*w, out, synthetic_gguf_tokenizer(preset, w->cfg.vocab));
  } else {
    ADD_FAILURE() << name << " is neither committed nor re-creatable";
  }
  return out;
}

// llama.cpp's logits of one file: rows are the kept prompt positions, then the steps.
struct LlamaRef {
  std::vector<int32_t> prompt, positions, steps;
  std::vector<float> logits, twin;  // [rows, V]
  int vocab = 0;
};

template <class T>
std::vector<T> tensor_data(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) throw std::runtime_error(name + " missing from a reference file");
  const auto* p = static_cast<const T*>(t->data);
  return std::vector<T>(p, p + t->nbytes / sizeof(T));
}

LlamaRef read_ref(const std::string& name) {
  auto f = SafetensorsFile::open(kDir + "/llama-" + name + ".safetensors");
  LlamaRef r;
  r.prompt = tensor_data<int32_t>(*f, "prompt_ids");
  r.positions = tensor_data<int32_t>(*f, "positions");
  r.steps = tensor_data<int32_t>(*f, "step_ids");
  r.logits = tensor_data<float>(*f, "logits");
  r.twin = tensor_data<float>(*f, "twin_logits");
  r.vocab = int(f->find("logits")->shape.at(1));
  return r;
}

std::shared_ptr<ModelWeights> load_quiet(const std::string& p) {
  ::testing::internal::CaptureStderr();
  try {
    auto w = load_model(p);
    ::testing::internal::GetCapturedStderr();
    return w;
  } catch (...) {
    ::testing::internal::GetCapturedStderr();
    throw;
  }
}

// lily's reference path on the same rows: the prompt as one forward, then each step id alone.
std::vector<float> lily_rows(const std::shared_ptr<ModelWeights>& w, const LlamaRef& r) {
  const size_t V = size_t(w->cfg.vocab);
  auto be = make_backend("cpu-ref", w);
  auto st = be->new_state(1024);
  const int L = int(r.prompt.size());
  std::vector<float> all(size_t(L) * V), out;
  be->forward(*st, r.prompt.data(), L, L, all.data(), {});
  for (int32_t p : r.positions) out.insert(out.end(), all.begin() + p * V, all.begin() + (p + 1) * V);
  std::vector<float> row(V);
  for (int32_t id : r.steps) {
    be->forward(*st, &id, 1, 1, row.data(), {});
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

int argmax(const float* x, int V) { return int(std::max_element(x, x + V) - x); }

// Gap between the largest and second largest logit of a row.
double top2_gap(const float* x, int V) {
  float a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < V; ++i) {
    if (x[i] > a) b = a, a = x[i];
    else if (x[i] > b) b = x[i];
  }
  return double(a) - double(b);
}

}  // namespace

// The test conversion of the tiny fixture is, tensor for tensor, what llama.cpp's converter wrote (names,
// types, shapes, the bytes of every weight), for BF16, F16 and BF16 with fused gate/up experts.
TEST(GgufLlama, TestConversionIsTheConvertersOutput) {
  TempDir d;
  for (const std::string name : {"tiny-bf16", "tiny-f16", "tiny-bf16-fused"}) expect_manifest_tensors(variant_file(name, d), name);
}

// The committed files are llama-quantize's output as recorded, and hold the types the manifest lists.
TEST(GgufLlama, CommittedFilesAreTheQuantisersOutput) {
  int n = 0;
  for (const auto& [name, f] : manifest().at("files").items()) {
    if (!f.at("committed").get<bool>()) continue;
    expect_manifest_tensors(kDir + "/" + name + ".gguf", name);
    ++n;
  }
  EXPECT_GE(n, 3);
}

// `lily synth --gguf` writes today what llama.cpp's logits were dumped from.
TEST(GgufLlama, SynthSmallIsTheDumpedFile) {
  TempDir d;
  expect_manifest_tensors(variant_file("synth-small", d), "synth-small");
}

class GgufLlamaLogits : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufLlamaLogits, MatchLlamaCpp) {
  const std::string name = GetParam();
  TempDir d;
  auto w = load_quiet(variant_file(name, d));
  const LlamaRef r = read_ref(name);
  ASSERT_EQ(r.vocab, w->cfg.vocab);
  const std::vector<float> got = lily_rows(w, r);
  ASSERT_EQ(got.size(), r.logits.size());
  const int V = r.vocab, rows = int(got.size()) / V;
  const double vs_twin = max_abs_diff(got, r.twin), vs_file = max_abs_diff(got, r.logits);
  const double act = max_abs_diff(r.logits, r.twin), bound = 1.5 * act + 1e-3;
  int top1_twin = 0, top1_file = 0, decided = 0;
  for (int i = 0; i < rows; ++i) {
    const float* g = got.data() + size_t(i) * size_t(V);
    top1_twin += argmax(g, V) == argmax(r.twin.data() + size_t(i) * size_t(V), V);
    const float* l = r.logits.data() + size_t(i) * size_t(V);
    if (top2_gap(l, V) > act) {
      ++decided;
      top1_file += argmax(g, V) == argmax(l, V);
    }
  }
  std::printf("[ %s ] lily vs llama.cpp F32 twin: max |dlogit| %.3g, top-1 %d/%d; vs llama.cpp on the file: %.3g "
              "(llama.cpp's own file-vs-twin %.3g, bound %.3g), top-1 %d/%d\n",
              name.c_str(), vs_twin, top1_twin, rows, vs_file, act, bound, top1_file, decided);
  EXPECT_EQ(top1_twin, rows);
  EXPECT_LE(vs_twin, 1e-3);
  EXPECT_EQ(top1_file, decided);
  EXPECT_LE(vs_file, bound);
}

INSTANTIATE_TEST_SUITE_P(GgufLlama, GgufLlamaLogits,
                         ::testing::Values("tiny-bf16", "tiny-f16", "tiny-Q4_0", "tiny-Q4_K_M", "tiny-Q5_K_M",
                                           "synth-small"),
                         [](const auto& i) {
                           std::string s = i.param;
                           std::replace(s.begin(), s.end(), '-', '_');
                           return s;
                         });

// llama.cpp's BF16 and F16 files against transformers, as the safetensors checkpoints are checked.
TEST(GgufLlama, Bf16AndF16FilesMatchTransformers) {
  auto ref = SafetensorsFile::open(std::string(LILY_TEST_DIR) + "/fixtures/tiny/reference-bf16.safetensors");
  const std::vector<int32_t> ids = tensor_data<int32_t>(*ref, "prompt_ids");
  const std::vector<float> want = tensor_data<float>(*ref, "prompt_logits");
  TempDir d;
  for (const std::string name : {"tiny-bf16", "tiny-f16"}) {
    auto w = load_quiet(variant_file(name, d));
    auto be = make_backend("cpu-ref", w);
    auto st = be->new_state(1024);
    const int L = int(ids.size()), V = w->cfg.vocab;
    std::vector<float> got(size_t(L) * size_t(V));
    be->forward(*st, ids.data(), L, L, got.data(), {});
    int top1 = 0;
    for (int i = 0; i < L; ++i)
      top1 += argmax(got.data() + size_t(i) * size_t(V), V) == argmax(want.data() + size_t(i) * size_t(V), V);
    const double m = max_abs_diff(got, want);
    std::printf("[ %s vs transformers ] top-1 %d/%d, max |dlogit| %.3g\n", name.c_str(), top1, L, m);
    EXPECT_EQ(top1, L) << name;
    EXPECT_LE(m, 1e-3) << name;
  }
}

// lily's tokenizer built from the GGUF metadata against llama.cpp's tokenisation of the same texts (special
// tokens in the text recognised, nothing added), on every tiny tokenizer case. llama.cpp does not apply the
// tokenizer's NFC normaliser, so on texts that NFC changes its ids may differ from Hugging Face's; there lily
// must give Hugging Face's ids, everywhere else llama.cpp's.
TEST(GgufLlama, TokenizerIdsMatchLlamaCpp) {
  GgufModel m(kDir + "/tiny-Q4_0.gguf");
  auto tok = gguf_tokenizer(m);
  const auto cases = lily::test::read_cases(LILY_TEST_DIR "/fixtures/tiny/tokenizer_cases.jsonl");
  const Normalizer nfc = Normalizer::from_json(nlohmann::json{{"type", "NFC"}});
  std::ifstream in(kDir + "/llama-tokens.jsonl");
  std::string line;
  size_t i = 0, same = 0, not_nfc = 0;
  while (std::getline(in, line)) {
    ASSERT_LT(i, cases.size());
    const lily::test::TokCase& c = cases[i];
    const auto llama = nlohmann::json::parse(line).at("ids").get<std::vector<int32_t>>();
    const auto got = tok->encode(c.text);
    if (llama == c.ids) {
      EXPECT_EQ(got, llama) << "case " << i << ": " << c.text;
      ++same;
    } else {
      EXPECT_NE(nfc.apply(c.text), c.text) << "case " << i << ": llama.cpp differs from Hugging Face on NFC text";
      EXPECT_EQ(got, c.ids) << "case " << i << ": " << c.text;
      ++not_nfc;
    }
    ++i;
  }
  EXPECT_EQ(i, cases.size());
  EXPECT_GT(same, cases.size() / 2);
  std::printf("[ tokenizer ] %zu texts: lily = llama.cpp = Hugging Face on %zu; on the other %zu (texts NFC changes) "
              "llama.cpp differs and lily gives Hugging Face's ids\n", i, same, not_nfc);
}
