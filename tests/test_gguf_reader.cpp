// GGUF reader: round trips through the writer, every metadata value type, alignment, split files, and the
// errors (each naming the file and the key or tensor).
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "io/gguf.h"
#include "io/gguf_quants.h"
#include "io/gguf_writer.h"
#include "loader_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

GgufWriter sample_writer(uint32_t align = 32) {
  GgufWriter w(align);
  w.add_string("general.architecture", "qwen35moe");
  w.add_u32("qwen35moe.block_count", 3);
  w.add_f32("qwen35moe.rope.freq_base", 1e7f);
  w.add_bool("flag", true);
  w.add_strings("tokenizer.ggml.tokens", {"a", "", "héllo"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 3, -2});
  w.add_f32s("scores", {0.5f, -1.0f});
  std::vector<float> x(256 * 2);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i % 37) * 0.25f - 4.0f;
  w.add_tensor("f32", GgmlType::F32, {3}, f32_bytes({1, 2, 3}));
  w.add_tensor("q8", GgmlType::Q8_0, {2, 256}, gguf_quantize(GgmlType::Q8_0, x.data(), 512));
  w.add_tensor("q4k", GgmlType::Q4_K, {2, 256}, gguf_quantize(GgmlType::Q4_K, x.data(), 512));
  return w;
}

std::shared_ptr<const GgufFile> parse(std::vector<uint8_t> b, const std::string& name = "t.gguf") {
  return std::make_shared<const GgufFile>(MappedFile::from_bytes(std::move(b), name));
}

// Little-endian appenders for hand-built files.
template <class T>
void put(std::vector<uint8_t>& b, T v) {
  uint8_t t[sizeof(T)];
  std::memcpy(t, &v, sizeof(T));
  b.insert(b.end(), t, t + sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

}  // namespace

TEST(GgufReader, RoundTripThroughWriter) {
  for (uint32_t align : {32u, 64u, 256u}) {
    auto f = parse(sample_writer(align).bytes());
    EXPECT_EQ(f->version(), 3u);
    EXPECT_EQ(f->alignment(), align);
    EXPECT_EQ(f->data_offset() % align, 0u);
    EXPECT_EQ(f->kv("general.architecture")->s, "qwen35moe");
    EXPECT_EQ(f->kv("qwen35moe.block_count")->i, 3);
    EXPECT_EQ(f->kv("qwen35moe.rope.freq_base")->f, 1e7f);
    EXPECT_EQ(f->kv("flag")->i, 1);
    EXPECT_EQ(f->kv("tokenizer.ggml.tokens")->strs, (std::vector<std::string>{"a", "", "héllo"}));
    EXPECT_EQ(f->kv("tokenizer.ggml.token_type")->ints, (std::vector<int64_t>{1, 3, -2}));
    EXPECT_EQ(f->kv("scores")->floats, (std::vector<double>{0.5, -1.0}));
    EXPECT_EQ(f->kv("missing"), nullptr);
    EXPECT_EQ(f->names(), (std::vector<std::string>{"f32", "q8", "q4k"}));
    const GgufTensor* t = f->find("q4k");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->ne, (std::vector<int64_t>{256, 2}));
    EXPECT_EQ(t->shape(), (std::vector<int64_t>{2, 256}));
    EXPECT_EQ(t->nbytes, 2u * 144u);
    EXPECT_EQ(t->offset % align, 0u);
    const GgufTensor* a = f->find("f32");
    float v[3];
    std::memcpy(v, a->data, 12);
    EXPECT_EQ(v[2], 3.0f);
  }
}

TEST(GgufReader, EveryScalarType) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 0x46554747u);
  put<uint32_t>(b, 3);
  put<uint64_t>(b, 0);
  put<uint64_t>(b, 9);
  auto kv = [&](const std::string& k, GgufType t) { put_str(b, k), put<uint32_t>(b, uint32_t(t)); };
  kv("u8", GgufType::U8), put<uint8_t>(b, 250);
  kv("i8", GgufType::I8), put<int8_t>(b, -5);
  kv("u16", GgufType::U16), put<uint16_t>(b, 65000);
  kv("i16", GgufType::I16), put<int16_t>(b, -300);
  kv("i32", GgufType::I32), put<int32_t>(b, -70000);
  kv("u64", GgufType::U64), put<uint64_t>(b, uint64_t(1) << 40);
  kv("i64", GgufType::I64), put<int64_t>(b, -(int64_t(1) << 40));
  kv("f64", GgufType::F64), put<double>(b, 0.1);
  kv("u16s", GgufType::ARRAY), put<uint32_t>(b, uint32_t(GgufType::U16)), put<uint64_t>(b, 2), put<uint16_t>(b, 7),
      put<uint16_t>(b, 9);
  auto f = parse(b);
  EXPECT_EQ(f->kv("u8")->i, 250);
  EXPECT_EQ(f->kv("i8")->i, -5);
  EXPECT_EQ(f->kv("u16")->i, 65000);
  EXPECT_EQ(f->kv("i16")->i, -300);
  EXPECT_EQ(f->kv("i32")->i, -70000);
  EXPECT_EQ(f->kv("u64")->i, int64_t(1) << 40);
  EXPECT_EQ(f->kv("i64")->i, -(int64_t(1) << 40));
  EXPECT_EQ(f->kv("f64")->f, 0.1);
  EXPECT_EQ(f->kv("u16s")->ints, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(f->keys().size(), 9u);
}

TEST(GgufReader, ErrorsNameFileAndKeyOrTensor) {
  const std::vector<uint8_t> good = sample_writer().bytes();
  // Not GGUF, wrong version.
  EXPECT_NE(error_of([&] { parse({'G', 'G', 'U', 'X', 3, 0, 0, 0}); }).find("not a GGUF file"), std::string::npos);
  auto v2 = good;
  v2[4] = 2;
  EXPECT_NE(error_of([&] { parse(v2); }).find("version 2"), std::string::npos);
  // Truncated inside the data section: names the last tensor.
  auto cut = good;
  cut.resize(cut.size() - 10);
  std::string e = error_of([&] { parse(cut, "cut.gguf"); });
  EXPECT_NE(e.find("cut.gguf"), std::string::npos) << e;
  EXPECT_NE(e.find("'q4k'"), std::string::npos) << e;
  // Huge tensor count.
  auto huge = good;
  const uint64_t big = uint64_t(1) << 60;
  std::memcpy(huge.data() + 8, &big, 8);
  EXPECT_NE(error_of([&] { parse(huge); }).find("tensor count"), std::string::npos);
  // A string length past the end of the file, on the first key.
  auto len = good;
  std::memcpy(len.data() + 24, &big, 8);
  e = error_of([&] { parse(len); });
  EXPECT_NE(e.find("metadata key #0"), std::string::npos) << e;
  // Unknown ggml type and misaligned offset of a tensor: hand-built.
  for (int which = 0; which < 4; ++which) {
    std::vector<uint8_t> b;
    put<uint32_t>(b, 0x46554747u);
    put<uint32_t>(b, 3);
    put<uint64_t>(b, 1);
    put<uint64_t>(b, 0);
    put_str(b, "blk.0.attn_q.weight");
    put<uint32_t>(b, which == 3 ? 5 : 2);
    put<uint64_t>(b, which == 2 ? 33 : 32);
    put<uint64_t>(b, 1);
    put<uint32_t>(b, which == 0 ? 77u : 8u);
    put<uint64_t>(b, which == 1 ? 4 : 0);
    b.resize(4096, 0);
    e = error_of([&] { parse(b, "m.gguf"); });
    EXPECT_NE(e.find("m.gguf: tensor 'blk.0.attn_q.weight'"), std::string::npos) << e;
    const char* want[] = {"unsupported ggml type id 77", "not a multiple of the alignment", "not a multiple of Q8_0",
                          "5 dimensions"};
    EXPECT_NE(e.find(want[which]), std::string::npos) << e;
  }
}

TEST(GgufReader, SplitFiles) {
  TempDir d;
  for (int k = 0; k < 3; ++k) {
    GgufWriter w;
    w.add_u32("split.no", uint32_t(k));
    w.add_u32("split.count", 3);
    if (k == 0) w.add_string("general.architecture", "qwen35moe");
    std::string name = "t";  // appended: GCC 12 -Wrestrict misfires on "t" + std::string
    name += std::to_string(k);
    w.add_tensor(name, GgmlType::F32, {2}, f32_bytes({float(k), 1.0f}));
    w.write(d / gguf_split_path("m", k + 1, 3));
  }
  for (int k = 1; k <= 3; ++k) {
    GgufModel m(d / gguf_split_path("m", k, 3));
    EXPECT_EQ(m.names(), (std::vector<std::string>{"t0", "t1", "t2"}));
    EXPECT_EQ(m.get_string("general.architecture"), "qwen35moe");
    float v;
    std::memcpy(&v, m.get("t2").data, 4);
    EXPECT_EQ(v, 2.0f);
    EXPECT_NE(error_of([&] { m.get("t9"); }).find("tensor 't9' not found in"), std::string::npos);
  }
  int no, count;
  std::string prefix;
  EXPECT_TRUE(gguf_split_name("/x/Qwen-Q4_K_M-00002-of-00003.gguf", &no, &count, &prefix));
  EXPECT_EQ(no, 2);
  EXPECT_EQ(count, 3);
  EXPECT_EQ(prefix, "/x/Qwen-Q4_K_M");
  EXPECT_FALSE(gguf_split_name("/x/Qwen-Q4_K_M.gguf", &no, &count, &prefix));
  EXPECT_FALSE(gguf_split_name("/x/Q-00004-of-00003.gguf", &no, &count, &prefix));
  // A missing part, a part with the wrong split.no.
  fs::remove(d / gguf_split_path("m", 2, 3));
  std::string e = error_of([&] { GgufModel m(d / gguf_split_path("m", 1, 3)); });
  EXPECT_NE(e.find("split part 2 of 3 is missing"), std::string::npos) << e;
  GgufWriter w;
  w.add_u32("split.no", 0);
  w.add_u32("split.count", 3);
  w.write(d / gguf_split_path("m", 2, 3));
  e = error_of([&] { GgufModel m(d / gguf_split_path("m", 1, 3)); });
  EXPECT_NE(e.find("'split.no' should be 1"), std::string::npos) << e;
}

TEST(GgufReader, TypedAccessErrors) {
  TempDir d;
  sample_writer().write(d / "a.gguf");
  GgufModel m(d / "a.gguf");
  EXPECT_EQ(m.get_int("qwen35moe.block_count"), 3);
  EXPECT_EQ(m.get_int("absent", 42), 42);
  EXPECT_FLOAT_EQ(float(m.get_float("qwen35moe.rope.freq_base")), 1e7f);
  std::string e = error_of([&] { m.get_int("general.architecture"); });
  EXPECT_NE(e.find("a.gguf: metadata key 'general.architecture': expected an integer, found string"),
            std::string::npos) << e;
  e = error_of([&] { m.get_string("qwen35moe.expert_count"); });
  EXPECT_NE(e.find("'qwen35moe.expert_count' is missing"), std::string::npos) << e;
}
