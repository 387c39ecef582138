// Helpers shared by the loader tests: fixture paths, temporary directories, rewriting checkpoints.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"

namespace lily_test {

namespace fs = std::filesystem;

inline std::string tiny(const std::string& sub) { return std::string(LILY_TEST_DIR) + "/fixtures/tiny/" + sub; }

// A fresh directory removed at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "lily_loader_XXXXXX").string();
    if (!mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return (fs::path(path) / f).string(); }
};

struct OwnedTensor {
  std::string name;
  lily::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Every tensor of a checkpoint directory, copied out.
inline std::vector<OwnedTensor> read_all(const std::string& dir) {
  lily::CheckpointFiles files(dir);
  std::vector<OwnedTensor> out;
  for (const std::string& n : files.names()) {
    const lily::TensorView& t = files.get(n);
    const auto* p = static_cast<const uint8_t*>(t.data);
    out.push_back({n, t.dtype, t.shape, std::vector<uint8_t>(p, p + t.nbytes)});
  }
  return out;
}

inline void write_owned(const std::string& path, const std::vector<OwnedTensor>& ts) {
  std::vector<lily::TensorToWrite> w;
  for (const auto& t : ts) w.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  lily::write_safetensors(path, w);
}

inline OwnedTensor* find_tensor(std::vector<OwnedTensor>& ts, const std::string& name) {
  for (auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline void write_text(const std::string& path, const std::string& s) {
  std::ofstream f(path, std::ios::binary);
  f << s;
}

// Copies `src`'s config files and its tensors (after `edit`) into `dst` as one model.safetensors.
inline void rewrite_checkpoint(const std::string& src, const std::string& dst,
                               const std::function<void(std::vector<OwnedTensor>&)>& edit) {
  for (const char* f : {"config.json", "generation_config.json"})
    if (fs::exists(fs::path(src) / f)) fs::copy_file(fs::path(src) / f, fs::path(dst) / f);
  auto ts = read_all(src);
  edit(ts);
  write_owned((fs::path(dst) / "model.safetensors").string(), ts);
}

// The lily::Error message thrown by fn, or "" (and a test failure) when it does not throw.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const lily::Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a lily::Error";
  return "";
}

inline bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

}  // namespace lily_test
