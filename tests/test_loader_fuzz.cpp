// Fuzz-style robustness: corrupt real shards (byte flips, truncations, length field, JSON edits) thousands of
// times with a fixed seed; every parse/load must succeed or throw lily::Error, never crash or read out of
// bounds (run once under -fsanitize=address: buffers are exact-size heap copies, so ASan sees any overrun).
#include <gtest/gtest.h>

#include <random>

#include "loader_test_util.h"
#include "model/config.h"
#include "model/weights.h"
#include "quant_fixture_writers.h"

using namespace lily;
using namespace lily_test;

namespace {

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::string s = read_text(path);
  return std::vector<uint8_t>(s.begin(), s.end());
}

uint64_t header_len(const std::vector<uint8_t>& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | b[size_t(i)];
  return n;
}

void set_len(std::vector<uint8_t>& b, uint64_t n) {
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
}

// One random corruption of a safetensors image, mostly aimed at the header.
std::vector<uint8_t> mutate(const std::vector<uint8_t>& src, std::mt19937_64& rng) {
  std::vector<uint8_t> b = src;
  const size_t hend = size_t(8 + header_len(src));
  auto pick = [&](size_t lo, size_t hi) { return lo + size_t(rng() % (hi - lo)); };
  static const char kJson[] = "{}[]\",:0123456789-.eE ";
  static const char* kTokens[] = {"-1", "1e30", "18446744073709551615", "9223372036854775807", "null", "[]", "{}",
                                  "\"U32\"", "\"F64\"", "0", "[0,0]", "[1,2,3]", "\"__metadata__\"", "true"};
  switch (rng() % 7) {
    case 0:  // flip a few header bytes
      for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k) b[pick(0, hend)] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:  // truncate anywhere, with a bias to the header
      b.resize(rng() % 2 ? pick(0, hend + 64) : pick(0, b.size()));
      break;
    case 2: {  // corrupt the length field
      const uint64_t n = header_len(src);
      const uint64_t choices[] = {0, 1, 7, n - 1, n + 1, n + 8, uint64_t(b.size()), uint64_t(b.size()) - 8,
                                  uint64_t(b.size()) - 7, ~uint64_t(0), uint64_t(1) << 63, rng()};
      set_len(b, choices[rng() % (sizeof choices / sizeof choices[0])]);
      break;
    }
    case 3:  // replace header characters with JSON-ish characters
      for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) b[pick(8, hend)] = uint8_t(kJson[rng() % (sizeof kJson - 1)]);
      break;
    case 4: {  // change a digit (offsets and shapes move)
      for (int tries = 0; tries < 64; ++tries) {
        size_t i = pick(8, hend);
        if (b[i] >= '0' && b[i] <= '9') {
          b[i] = uint8_t('0' + rng() % 10);
          break;
        }
      }
      break;
    }
    case 5: {  // splice a token into the header, keeping the length field consistent
      const std::string tok = kTokens[rng() % (sizeof kTokens / sizeof kTokens[0])];
      const size_t at = pick(8, hend), cut = std::min<size_t>(rng() % 6, hend - at);
      b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + cut));
      b.insert(b.begin() + std::ptrdiff_t(at), tok.begin(), tok.end());
      set_len(b, header_len(src) - cut + tok.size());
      break;
    }
    default:  // delete a header byte and fix the length (shifts the data section by one)
      b.erase(b.begin() + std::ptrdiff_t(pick(8, hend)));
      set_len(b, header_len(src) - 1);
      break;
  }
  return b;
}

// Parses, then touches the first and last byte of every tensor (ASan flags any view outside the buffer).
size_t parse_and_touch(std::vector<uint8_t> bytes) {
  SafetensorsFile f(MappedFile::from_bytes(std::move(bytes), "fuzz.safetensors"));
  size_t sum = 0;
  for (const std::string& n : f.names()) {
    const TensorView* t = f.find(n);
    if (t->nbytes) {
      const auto* p = static_cast<const uint8_t*>(t->data);
      sum += p[0] + p[t->nbytes - 1];
    }
  }
  return sum;
}

}  // namespace

TEST(LoaderFuzz, SafetensorsHeaderMutations) {
  std::mt19937_64 rng(20240601);
  int ok = 0, rejected = 0;
  for (const char* shard : {"model-bf16/model-00003-of-00003.safetensors", "model-mlx-4bit/model-00002-of-00002.safetensors",
                            "model-mlx-4bit-compact/model-00002-of-00002.safetensors"}) {
    const std::vector<uint8_t> src = file_bytes(tiny(shard));
    for (int it = 0; it < 2500; ++it) {
      std::vector<uint8_t> b = mutate(src, rng);
      try {
        parse_and_touch(std::move(b));
        ++ok;
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << "iteration " << it << ": exception other than lily::Error: " << e.what();
      }
    }
    // Every truncation length of the header and the start of the data.
    const size_t hend = size_t(8 + header_len(src));
    for (size_t len = 0; len < hend + 256; ++len) {
      try {
        parse_and_touch(std::vector<uint8_t>(src.begin(), src.begin() + std::ptrdiff_t(len)));
        ++ok;
      } catch (const Error&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(ok, 10);  // some mutations (e.g. inside string names) stay valid
}

TEST(LoaderFuzz, ConfigMutations) {
  std::mt19937_64 rng(7);
  const std::string src = read_text(tiny("model-mlx-4bit/config.json"));
  for (int it = 0; it < 2000; ++it) {
    std::string s = src;
    for (int k = 0, n = 1 + int(rng() % 4); k < n; ++k) {
      const size_t i = size_t(rng() % s.size());
      if (rng() % 3 == 0) s.erase(i, 1 + rng() % 8);
      else s[i] = "{}[]\",:0123456789-.x "[rng() % 22];
    }
    try {
      parse_config(s, "config.json");
    } catch (const Error&) {
    }
  }
}

// Whole loads through load_model: a corrupted shard among real ones (the loader's checks and the small-tensor
// decoding run on whatever the header lets through).
TEST(LoaderFuzz, LoadModelWithCorruptShard) {
  std::mt19937_64 rng(99);
  int ok = 0, rejected = 0;
  for (const char* model : {"model-bf16", "model-mlx-4bit", "model-mlx-4bit-compact"}) {
    TempDir d;
    std::string victim;
    for (const auto& e : fs::directory_iterator(tiny(model))) {
      fs::copy_file(e.path(), d / e.path().filename().string());
      const std::string n = e.path().filename().string();
      if (n.ends_with(".safetensors") && (victim.empty() || n > victim)) victim = n;  // the last shard
    }
    const std::vector<uint8_t> src = file_bytes(tiny(std::string(model) + "/" + victim));
    for (int it = 0; it < 300; ++it) {
      std::vector<uint8_t> b = mutate(src, rng);
      write_text(d / victim, std::string(b.begin(), b.end()));
      ::testing::internal::CaptureStderr();  // unexpected-tensor warnings
      try {
        auto w = load_model(d.path);
        ++ok;
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& e) {
        ADD_FAILURE() << model << " iteration " << it << ": exception other than lily::Error: " << e.what();
      }
      ::testing::internal::GetCapturedStderr();
    }
  }
  EXPECT_GT(rejected, 300);
  EXPECT_GT(ok, 0);
}

namespace {

// The quantised tensors of one module in each format (the ones a corrupt header entry must be reported for).
std::vector<std::string> quant_tensors(int fmt) {
  const std::string m = "model.language_model.layers.1.linear_attn.in_proj_qkv";
  const std::string e = "model.language_model.layers.2.mlp.experts.3.down_proj";
  switch (fmt) {
    case 0: return {m + ".qweight", m + ".qzeros", m + ".scales", m + ".g_idx", e + ".qweight"};
    case 1: return {m + ".qweight", m + ".qzeros", m + ".scales", e + ".qzeros"};
    case 2: return {m + ".weight_packed", m + ".weight_scale", m + ".weight_zero_point", m + ".weight_shape", e + ".weight_scale"};
    default: return {m + ".weight", m + ".weight_scale_inv", e + ".weight", e + ".weight_scale_inv"};
  }
}

DType same_size_wrong_dtype(DType d) {
  switch (dtype_size(d)) {
    case 1: return d == DType::U8 ? DType::I8 : DType::U8;
    case 2: return DType::I16;
    case 8: return DType::F64;
    default: return d == DType::F32 ? DType::U32 : DType::F32;
  }
}

}  // namespace

// GPTQ, AWQ, compressed-tensors and FP8 checkpoints with one quantised tensor's header entry made wrong (removed,
// another dtype of the same size, one more row, its bytes cut short): each load fails with a lily::Error that
// names the file and the tensor; then random header mutations of the whole file never crash.
TEST(LoaderFuzz, QuantisedFormatHeaders) {
  std::mt19937_64 rng(42);
  for (int fmt = 0; fmt < 4; ++fmt) {
    SCOPED_TRACE(fmt);
    TempDir d;
    if (fmt == 0) write_int4(d.path, Fmt::Gptq);
    else if (fmt == 1) write_int4(d.path, Fmt::Awq);
    else if (fmt == 2) write_int4(d.path, Fmt::CtAsym);
    else write_fp8(d.path, DType::BF16);
    for (const std::string& name : quant_tensors(fmt)) {
      for (int kind = 0; kind < 4; ++kind) {
        if (kind == 0 && (name.ends_with(".g_idx") || name.ends_with(".weight_shape"))) continue;  // optional
        TempDir e;
        rewrite_checkpoint(d.path, e.path, [&](std::vector<OwnedTensor>& ts) {
          OwnedTensor* t = find_tensor(ts, name);
          ASSERT_NE(t, nullptr) << name;
          if (kind == 0) ts.erase(ts.begin() + (t - ts.data()));
          else if (kind == 1) t->dtype = same_size_wrong_dtype(t->dtype);
          else if (kind == 2) {
            const size_t row = t->bytes.size() / size_t(t->shape[0]);
            t->shape[0] += 1;
            t->bytes.resize(t->bytes.size() + row, 0);
          } else {
            const size_t es = dtype_size(t->dtype), n = t->bytes.size() / es;
            const size_t m = n >= 2 ? n / 2 : n + 1;  // another element count, as a flat tensor
            t->bytes.resize(m * es, 0);
            t->shape = {int64_t(m)};
          }
        });
        std::string err;
        ::testing::internal::CaptureStderr();
        try {
          load_model(e.path);
        } catch (const Error& x) {
          err = x.what();
        }
        ::testing::internal::GetCapturedStderr();
        const std::string module = name.substr(0, name.rfind('.'));
        EXPECT_TRUE(contains(err, "model.safetensors") && contains(err, module))
            << name << " mutation " << kind << ": " << (err.empty() ? "loaded" : err);
      }
    }
    const std::vector<uint8_t> src = file_bytes(d / "model.safetensors");
    int rejected = 0;
    for (int it = 0; it < 150; ++it) {
      std::vector<uint8_t> b = mutate(src, rng);
      write_text(d / "model.safetensors", std::string(b.begin(), b.end()));
      ::testing::internal::CaptureStderr();
      try {
        load_model(d.path);
      } catch (const Error&) {
        ++rejected;
      } catch (const std::exception& x) {
        ADD_FAILURE() << "iteration " << it << ": exception other than lily::Error: " << x.what();
      }
      ::testing::internal::GetCapturedStderr();
    }
    EXPECT_GT(rejected, 50);
  }
}
