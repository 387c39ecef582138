// Fuzz-style robustness of the GGUF reader: thousands of corrupted images (bit flips, truncations, counts,
// lengths and offsets overwritten with huge or shifted values) with a fixed seed; each must parse or throw
// lily::Error, never crash or read out of bounds (buffers are exact-size heap copies: ASan sees any overrun).
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/gguf_writer.h"

using namespace lily;

namespace {

std::vector<uint8_t> source_image() {
  GgufWriter w;
  w.add_string("general.architecture", "qwen35moe");
  w.add_u32("qwen35moe.block_count", 2);
  w.add_strings("tokenizer.ggml.tokens", {"hello", "world", "<|im_end|>", "Ġthe"});
  w.add_strings("tokenizer.ggml.merges", {"h e", "l l"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 1, 3, 1});
  w.add_f32("qwen35moe.attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<float> x(512);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 29) - 14) * 0.1f;
  w.add_tensor("token_embd.weight", GgmlType::Q4_K, {2, 256}, gguf_quantize(GgmlType::Q4_K, x.data(), 512));
  w.add_tensor("blk.0.ffn_down_exps.weight", GgmlType::Q6_K, {2, 256}, gguf_quantize(GgmlType::Q6_K, x.data(), 512));
  w.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {64}, std::vector<uint8_t>(256, 0));
  w.add_tensor("blk.0.attn_q.weight", GgmlType::Q8_0, {4, 64}, gguf_quantize(GgmlType::Q8_0, x.data(), 256));
  w.add_tensor("blk.0.attn_k.weight", GgmlType::Q5_0, {1, 64}, gguf_quantize(GgmlType::Q5_0, x.data(), 64));
  return w.bytes();
}

// Parses, then decodes every tensor the reader accepted (ASan flags any view outside the buffer).
double parse_and_decode(std::vector<uint8_t> bytes) {
  GgufFile f(MappedFile::from_bytes(std::move(bytes), "fuzz.gguf"));
  double sum = 0;
  for (const std::string& n : f.names()) {
    const GgufTensor* t = f.find(n);
    if (!gguf_can_decode(t->type) || t->numel() == 0 || t->numel() > (1 << 20)) continue;
    std::vector<float> y(size_t(t->numel()));
    gguf_dequant_row(t->type, t->data, t->numel(), y.data());
    sum += double(y.front()) + double(y.back());
  }
  return sum;
}

std::vector<uint8_t> mutate(const std::vector<uint8_t>& src, size_t hdr_end, std::mt19937_64& rng) {
  std::vector<uint8_t> b = src;
  auto pick = [&](size_t lo, size_t hi) { return lo + size_t(rng() % (hi - lo)); };
  const uint64_t huge[] = {~uint64_t(0), uint64_t(1) << 63, uint64_t(1) << 32, uint64_t(b.size()),
                           uint64_t(b.size()) + 1, 0, 1, 31, 32, 33, 255, rng()};
  switch (rng() % 5) {
    case 0:  // flip bits in the header
      for (int k = 0, n = 1 + int(rng() % 6); k < n; ++k) b[pick(0, hdr_end)] ^= uint8_t(1u << (rng() % 8));
      break;
    case 1:  // truncate, biased to the header
      b.resize(rng() % 2 ? pick(0, hdr_end + 64) : pick(0, b.size()));
      break;
    case 2: {  // an 8-byte field (count, length, dimension, offset) overwritten
      const size_t at = pick(0, hdr_end - 8);
      const uint64_t v = huge[rng() % (sizeof huge / sizeof huge[0])];
      std::memcpy(b.data() + at, &v, 8);
      break;
    }
    case 3: {  // a 4-byte field (type id, dimension count) overwritten
      const size_t at = pick(0, hdr_end - 4);
      const uint32_t v = uint32_t(rng() % 2 ? rng() % 40 : rng());
      std::memcpy(b.data() + at, &v, 4);
      break;
    }
    default:  // delete or insert a header byte (everything after shifts)
      if (rng() % 2) b.erase(b.begin() + std::ptrdiff_t(pick(0, hdr_end)));
      else b.insert(b.begin() + std::ptrdiff_t(pick(0, hdr_end)), uint8_t(rng()));
      break;
  }
  return b;
}

}  // namespace

TEST(GgufFuzz, HeaderMutations) {
  const std::vector<uint8_t> src = source_image();
  const size_t hdr_end = GgufFile(MappedFile::from_bytes(src, "src.gguf")).data_offset();
  ASSERT_GT(hdr_end, 64u);
  std::mt19937_64 rng(4343);
  int ok = 0, rejected = 0;
  for (int it = 0; it < 6000; ++it) {
    try {
      parse_and_decode(mutate(src, hdr_end, rng));
      ++ok;
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("fuzz.gguf"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << it << ": exception other than lily::Error: " << e.what();
    }
  }
  for (size_t len = 0; len < src.size(); ++len) {  // every truncation
    try {
      parse_and_decode(std::vector<uint8_t>(src.begin(), src.begin() + std::ptrdiff_t(len)));
      ++ok;
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 3000);
  EXPECT_GT(ok, 50);  // flips inside names and values stay valid
}
