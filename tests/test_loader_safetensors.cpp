// Safetensors reader/writer and CheckpointFiles: round trip and every header validation.
#include <gtest/gtest.h>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "loader_test_util.h"

using namespace lily;
using namespace lily_test;

namespace {

// A safetensors byte image from a header text and `data_bytes` zero bytes of data.
std::vector<uint8_t> raw(const std::string& header, size_t data_bytes, int64_t len_field = -1) {
  std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
  uint64_t n = len_field < 0 ? header.size() : uint64_t(len_field);
  for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

std::string parse_error(std::vector<uint8_t> bytes) {
  return error_of([&] { SafetensorsFile f(MappedFile::from_bytes(std::move(bytes), "t.safetensors")); });
}

}  // namespace

TEST(Safetensors, WriteThenReadRoundTrip) {
  TempDir d;
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> b = {f32_to_bf16(1.0f), f32_to_bf16(-0.5f), f32_to_bf16(2.0f)};
  write_safetensors(d / "x.safetensors", {{"a", DType::F32, {2, 3}, a.data(), a.size() * 4},
                                          {"b", DType::BF16, {3}, b.data(), b.size() * 2},
                                          {"empty", DType::F32, {0, 4}, nullptr, 0}});
  auto f = SafetensorsFile::open(d / "x.safetensors");
  ASSERT_EQ(f->names().size(), 3u);
  const TensorView* ta = f->find("a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->dtype, DType::F32);
  EXPECT_EQ(ta->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta->nbytes, 24u);
  EXPECT_EQ(std::memcmp(ta->data, a.data(), 24), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(ta->data) % 8, 0u);  // header padded to 8 bytes
  const TensorView* tb = f->find("b");
  ASSERT_NE(tb, nullptr);
  EXPECT_EQ(std::memcmp(tb->data, b.data(), 6), 0);
  EXPECT_EQ(f->find("empty")->nbytes, 0u);
  EXPECT_EQ(f->find("nope"), nullptr);
  EXPECT_EQ(shape_str(ta->shape), "[2, 3]");
}

TEST(Safetensors, WriterRejectsBadInput) {
  TempDir d;
  float x[2] = {0, 0};
  EXPECT_TRUE(contains(error_of([&] { write_safetensors(d / "w.safetensors", {{"x", DType::F32, {3}, x, 8}}); }),
                       "needs 12 bytes, got 8"));
  EXPECT_TRUE(contains(
      error_of([&] { write_safetensors(d / "w.safetensors", {{"x", DType::F32, {2}, x, 8}, {"x", DType::F32, {2}, x, 8}}); }),
      "duplicate tensor name"));
}

TEST(Safetensors, HeaderValidation) {
  const std::string ok_entry = R"("t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
  // A valid one parses.
  EXPECT_NO_THROW(SafetensorsFile(MappedFile::from_bytes(raw("{" + ok_entry + "}", 16), "t.safetensors")));
  // Too short, length beyond the file.
  EXPECT_EQ(parse_error({1, 2, 3}), "t.safetensors: file is 3 bytes; expected at least 8 (the safetensors header length)");
  EXPECT_EQ(parse_error(raw("{}", 0, 1000)),
            "t.safetensors: header length field says 1000 bytes; expected at most 2 (file size 10 - 8)");
  EXPECT_TRUE(contains(parse_error(raw("{}", 0, int64_t(0x7fffffffffffffffLL))), "header length field says"));
  // Bad JSON, wrong JSON type, deep nesting.
  EXPECT_TRUE(contains(parse_error(raw("{\"t\":{\"dtype\":", 0)), "t.safetensors: header (14 bytes) is not valid JSON"));
  EXPECT_EQ(parse_error(raw("[1,2]", 0)), "t.safetensors: header is a JSON array; expected a JSON object");
  EXPECT_TRUE(contains(parse_error(raw(std::string(5000, '[') + std::string(5000, ']'), 0)), "nests deeper than 64"));
  // Offsets out of range, unordered, overlapping, not matching the shape.
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 12)),
            "t.safetensors: tensor 't': data_offsets [0, 16] end beyond the data section of 12 bytes (file truncated or "
            "offsets corrupt)");
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", 16)),
            "t.safetensors: tensor 't': data_offsets [8, 4] are not ordered (begin > end)");
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16)),
            "t.safetensors: tensor 't': shape [2, 2] of F32 needs 16 bytes, but data_offsets [0, 12] span 12");
  EXPECT_EQ(parse_error(raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
                            16)),
            "t.safetensors: tensor 'b': data_offsets [8, 16] overlap tensor 'a' at [0, 16]; expected disjoint byte ranges");
  // Shapes: negative, non-integer, overflowing; dtype unknown; fields missing.
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0)),
            "t.safetensors: tensor 't': expected non-negative integer dimensions in shape, found -1 (negative)");
  EXPECT_TRUE(contains(parse_error(raw(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4)),
                       "found a JSON number"));
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0)),
            "t.safetensors: tensor 't': shape [4294967296, 4294967296] overflows the element count");
  EXPECT_EQ(parse_error(raw(R"({"t":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1)),
            "t.safetensors: tensor 't': expected a known dtype, found 'Q4'");
  EXPECT_EQ(parse_error(raw(R"({"t":{"shape":[1],"data_offsets":[0,1]}})", 1)),
            "t.safetensors: tensor 't': expected a string 'dtype', found none");
  EXPECT_TRUE(contains(parse_error(raw(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", 1)),
                       "expected 'data_offsets' [begin, end], found a JSON array of size 1"));
  EXPECT_TRUE(contains(parse_error(raw(R"({"t":{"dtype":"U8","shape":[1],"data_offsets":[0,-1]}})", 1)),
                       "expected non-negative integer data_offsets, found -1 (negative)"));
  EXPECT_TRUE(contains(parse_error(raw(R"({"t":7})", 0)), "header entry is a JSON number; expected an object"));
  // __metadata__ is skipped whatever it holds.
  EXPECT_NO_THROW(SafetensorsFile(MappedFile::from_bytes(raw(R"({"__metadata__":{"format":"pt"},)" + ok_entry + "}", 16),
                                                         "t.safetensors")));
}

TEST(Safetensors, TruncatedRealShard) {
  TempDir d;
  const std::string src = tiny("model-bf16/model-00003-of-00003.safetensors");
  std::string bytes = read_text(src);
  write_text(d / "cut.safetensors", bytes.substr(0, bytes.size() - 100));
  std::string msg = error_of([&] { SafetensorsFile::open(d / "cut.safetensors"); });
  EXPECT_TRUE(contains(msg, "cut.safetensors: tensor '")) << msg;
  EXPECT_TRUE(contains(msg, "end beyond the data section")) << msg;
  write_text(d / "cut2.safetensors", bytes.substr(0, 100));
  msg = error_of([&] { SafetensorsFile::open(d / "cut2.safetensors"); });
  EXPECT_TRUE(contains(msg, "header length field says 3352 bytes; expected at most 92")) << msg;
  write_text(d / "empty.safetensors", "");
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(d / "empty.safetensors"); }), "file is 0 bytes"));
  EXPECT_TRUE(contains(error_of([&] { SafetensorsFile::open(d / "absent.safetensors"); }), "cannot open"));
}

TEST(CheckpointFiles, IndexedShards) {
  CheckpointFiles f(tiny("model-bf16"));
  EXPECT_TRUE(f.has_index());
  const TensorView& t = f.get("model.language_model.layers.3.self_attn.q_proj.weight");
  EXPECT_TRUE(contains(t.file, "model-00003-of-00003.safetensors"));
  EXPECT_EQ(t.shape, (std::vector<int64_t>{512, 128}));
  EXPECT_EQ(f.find("nope"), nullptr);
  std::string msg = error_of([&] { f.get("nope"); });
  EXPECT_TRUE(contains(msg, "tensor 'nope' not found (searched model.safetensors.index.json and "
                            "model-00001-of-00003.safetensors, model-00002-of-00003.safetensors, "
                            "model-00003-of-00003.safetensors, model-mtp.safetensors in "))
      << msg;
}

TEST(CheckpointFiles, IndexNamingMissingShard) {
  TempDir d;
  for (const auto& e : fs::directory_iterator(tiny("model-bf16"))) fs::copy_file(e.path(), d / e.path().filename().string());
  fs::remove(d / "model-00002-of-00003.safetensors");
  std::string msg = error_of([&] { CheckpointFiles f(d.path); });
  EXPECT_TRUE(contains(msg, "model.safetensors.index.json: weight_map names file 'model-00002-of-00003.safetensors'"))
      << msg;
  EXPECT_TRUE(contains(msg, "does not exist")) << msg;
}

TEST(CheckpointFiles, IndexEntryAbsentFromShard) {
  TempDir d;
  for (const auto& e : fs::directory_iterator(tiny("model-bf16"))) fs::copy_file(e.path(), d / e.path().filename().string());
  std::string idx = read_text(d / "model.safetensors.index.json");
  const std::string from = "\"lm_head.weight\": \"model-00001-of-00003.safetensors\"";
  ASSERT_NE(idx.find(from), std::string::npos);
  idx.replace(idx.find(from), from.size(), "\"lm_head.weight\": \"model-00002-of-00003.safetensors\"");
  write_text(d / "model.safetensors.index.json", idx);
  CheckpointFiles f(d.path);
  std::string msg = error_of([&] { f.find("lm_head.weight"); });
  EXPECT_TRUE(contains(msg, "model-00002-of-00003.safetensors: tensor 'lm_head.weight': listed in "
                            "model.safetensors.index.json for this file, but the file has no such tensor"))
      << msg;
  write_text(d / "model.safetensors.index.json", R"({"weight_map": {"x": "../escape.safetensors"}})");
  EXPECT_TRUE(contains(error_of([&] { CheckpointFiles g(d.path); }), "expected a file name inside the directory"));
  write_text(d / "model.safetensors.index.json", "{not json");
  EXPECT_TRUE(contains(error_of([&] { CheckpointFiles g(d.path); }), "model.safetensors.index.json: not valid JSON"));
}

TEST(CheckpointFiles, UnindexedFiles) {
  TempDir d;
  float x[2] = {1, 2};
  write_safetensors(d / "b.safetensors", {{"x", DType::F32, {2}, x, 8}});
  write_safetensors(d / "a.safetensors", {{"y", DType::F32, {2}, x, 8}});
  {
    CheckpointFiles f(d.path);
    EXPECT_FALSE(f.has_index());
    EXPECT_TRUE(contains(f.get("x").file, "b.safetensors"));
    EXPECT_TRUE(contains(f.files_searched(), "a.safetensors, b.safetensors in "));
  }
  write_safetensors(d / "c.safetensors", {{"x", DType::F32, {2}, x, 8}});
  EXPECT_TRUE(contains(error_of([&] { CheckpointFiles f(d.path); }),
                       "tensor 'x' appears in both b.safetensors and c.safetensors"));
  // model.safetensors wins over the others when present.
  write_safetensors(d / "model.safetensors", {{"z", DType::F32, {2}, x, 8}});
  CheckpointFiles g(d.path);
  EXPECT_EQ(g.names(), std::vector<std::string>{"z"});
  TempDir empty;
  EXPECT_TRUE(contains(error_of([&] { CheckpointFiles h(empty.path); }), "found none"));
}
