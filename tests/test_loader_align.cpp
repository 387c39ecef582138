// Tensors at any offset: the compact MLX fixture (model-mlx-4bit-compact, written as MLX's save_safetensors
// writes: sorted compact header, no padding, odd header lengths, data in another order) and tensors misaligned
// inside an aligned file load to the same weights and the same logits as the aligned fixtures.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "loader_test_util.h"
#include "model/weights.h"

using namespace lily;
using namespace lily_test;

namespace {

std::vector<float> prompt_logits(const std::shared_ptr<ModelWeights>& w, const std::string& kind) {
  auto be = make_backend(kind, w);
  const std::vector<int32_t> ids = {1, 17, 4000, 256, 3, 99, 1024, 7};
  const int n = int(ids.size());
  std::vector<float> out(size_t(n) * size_t(w->cfg.vocab));
  auto st = be->new_state(64);
  be->forward(*st, ids.data(), n, n, out.data(), {});
  return out;
}

bool has_note(const ModelWeights& w, const std::string& sub) {
  for (const std::string& n : w.load_notes)
    if (contains(n, sub)) return true;
  return false;
}

struct Shard {
  uint64_t hlen = 0;
  nlohmann::ordered_json header;
  std::vector<uint8_t> bytes;
};

Shard read_shard(const std::string& path) {
  Shard s;
  const std::string raw = read_text(path);
  s.bytes.assign(raw.begin(), raw.end());
  for (int i = 7; i >= 0; --i) s.hlen = (s.hlen << 8) | s.bytes[size_t(i)];
  s.header = nlohmann::ordered_json::parse(raw.substr(8, size_t(s.hlen)));
  return s;
}

}  // namespace

TEST(LoaderAlign, CompactFixtureIsWrittenAsMlxWritesIt) {
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}) {
    const Shard s = read_shard(tiny(std::string("model-mlx-4bit-compact/") + f));
    EXPECT_EQ(s.hlen % 2, 1u) << f << ": odd header length, so every tensor is misaligned";
    EXPECT_EQ(s.header["__metadata__"], nlohmann::ordered_json({{"format", "mlx"}}));
    const std::string text(s.bytes.begin() + 8, s.bytes.begin() + 8 + std::ptrdiff_t(s.hlen));
    EXPECT_EQ(text.find(' '), std::string::npos) << "compact header, no padding";
    std::vector<std::string> keys;
    for (auto it = s.header.begin(); it != s.header.end(); ++it) keys.push_back(it.key());
    EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
    // The data is not in header order (MLX writes its hash map's order), and our MLX-style writer, given the
    // same data order, reproduces the shard byte for byte.
    std::vector<std::pair<uint64_t, std::string>> by_offset;
    for (auto it = s.header.begin(); it != s.header.end(); ++it)
      if (it.key() != "__metadata__") by_offset.push_back({it.value()["data_offsets"][0].get<uint64_t>(), it.key()});
    std::vector<std::pair<uint64_t, std::string>> sorted = by_offset;
    std::sort(sorted.begin(), sorted.end());
    if (by_offset.size() > 2) {
      EXPECT_NE(sorted, by_offset);
    }
    std::vector<TensorToWrite> tw;
    for (const auto& [off, name] : sorted) {
      const auto& e = s.header[name];
      const uint64_t b = e["data_offsets"][0], end = e["data_offsets"][1];
      DType dt;
      ASSERT_TRUE(dtype_from_string(e["dtype"].get<std::string>(), &dt));
      tw.push_back({name, dt, e["shape"].get<std::vector<int64_t>>(), s.bytes.data() + 8 + s.hlen + b, size_t(end - b)});
    }
    TempDir d;
    write_safetensors(d / "x.safetensors", tw, SafetensorsStyle::Mlx);
    const std::string ours = read_text(d / "x.safetensors");
    EXPECT_TRUE(ours.size() == s.bytes.size() && std::memcmp(ours.data(), s.bytes.data(), ours.size()) == 0) << f;
  }
}

TEST(LoaderAlign, CompactMlxLoadsToTheSameWeightsAndLogits) {
  auto a = load_model(tiny("model-mlx-4bit"));
  auto c = load_model(tiny("model-mlx-4bit-compact"));
  EXPECT_TRUE(a->load_notes.empty());
  EXPECT_TRUE(has_note(*c, "2 shard(s) with the data section at an unaligned offset"));
  EXPECT_TRUE(has_note(*c, "read into aligned memory instead of mapped"));
  EXPECT_EQ(c->layout, "mlx-affine");
  // every weight view is aligned to its element size
  auto aligned = [](const QMatrix& m) {
    const size_t es = m.kind == QMatrix::Kind::Affine ? 4 : dtype_size(m.dtype);
    const size_t ss = m.kind == QMatrix::Kind::Affine ? dtype_size(m.sdtype) : 1;
    return reinterpret_cast<uintptr_t>(m.w) % es == 0 && (!m.scales || reinterpret_cast<uintptr_t>(m.scales) % ss == 0);
  };
  EXPECT_TRUE(aligned(c->embed) && aligned(c->lm_head));
  for (const auto& l : c->layers) EXPECT_TRUE(aligned(l.moe.router) && aligned(l.moe.down.e[3]) && aligned(l.moe.sh_up));
  for (const char* kind : {"cpu-ref", "cpu"}) {
    const auto la = prompt_logits(a, kind), lc = prompt_logits(c, kind);
    ASSERT_EQ(la.size(), lc.size());
    EXPECT_EQ(std::memcmp(la.data(), lc.data(), la.size() * 4), 0) << kind << ": logits differ";
  }
}

TEST(LoaderAlign, MisalignedTensorsInsideAnAlignedFileAreCopied) {
  TempDir d;
  rewrite_checkpoint(tiny("model-bf16"), d.path, [](std::vector<OwnedTensor>& ts) {
    // three bytes first: every later tensor sits 3 bytes past an aligned offset (the header is padded)
    ts.insert(ts.begin(), OwnedTensor{"mtp.pad", DType::U8, {3}, {1, 2, 3}});
  });
  testing::internal::CaptureStderr();
  auto w = load_model(d.path);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(contains(err, "warning")) << err;
  EXPECT_TRUE(has_note(*w, "tensor(s) (")) << "copied tensors reported";
  EXPECT_TRUE(has_note(*w, "into aligned memory"));
  EXPECT_EQ(w->mtp_tensors.size(), 66u);  // the fixture's 65 MTP tensors and the pad
  EXPECT_NE(std::find(w->mtp_tensors.begin(), w->mtp_tensors.end(), "mtp.pad"), w->mtp_tensors.end());
  ASSERT_TRUE(w->checkpoint);
  EXPECT_EQ(w->checkpoint->get("mtp.pad").nbytes, 3u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->embed.w) % 2, 0u);
  auto ref = load_model(tiny("model-bf16"));
  const auto la = prompt_logits(ref, "cpu-ref"), lb = prompt_logits(w, "cpu-ref");
  EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * 4), 0);
}
