// Safetensors files: a read-only memory-mapped reader that validates every header entry before handing out
// views, a checkpoint directory (single file, sharded with an index, or a set of files), and a small writer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"

namespace lily {

// A file's bytes: memory-mapped read-only, or an owned buffer (tests, in-memory parsing).
class MappedFile {
 public:
  // Maps `path` read-only (throws lily::Error naming the path on failure).
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  // Wraps a copy of `bytes`, reported under the name `path`.
  static std::shared_ptr<const MappedFile> from_bytes(std::vector<uint8_t> bytes, const std::string& path);
  // Reads `path` whole into owned memory placed so that byte `at` of the file lies on a 64-byte boundary (a
  // safetensors file whose data section starts at an unaligned offset, as MLX writes them: reading it this way
  // aligns every tensor whose offset in the data section is a multiple of its element size).
  static std::shared_ptr<const MappedFile> read_aligned_at(const std::string& path, size_t at);

  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  std::string path_;
};

// One tensor of a safetensors file; `data` points into the file's mapping.
struct TensorView {
  const void* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  size_t nbytes = 0;
  std::string file;  // path of the file holding it

  int64_t numel() const;
};

// "[8192, 2048]"
std::string shape_str(const std::vector<int64_t>& shape);

// A parsed safetensors file. open() maps the file, or, when the data section does not start at a multiple of 8
// bytes (MLX's compact headers), reads it into memory where the data section is 64-byte aligned. Construction validates the whole header: length within the file, JSON object,
// known dtypes, non-negative shapes whose element count does not overflow, data_offsets ordered, inside the
// data section, not overlapping, and matching prod(shape) * dtype size. Any violation throws lily::Error.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(std::shared_ptr<const MappedFile> file);
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);

  const TensorView* find(const std::string& name) const;  // nullptr when absent
  const std::vector<std::string>& names() const { return names_; }  // in header order
  const std::string& path() const { return file_->path(); }
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }
  size_t data_offset() const { return data_offset_; }   // 8 + header length
  bool realigned() const { return realigned_; }         // read into aligned memory instead of mapped

 private:
  std::shared_ptr<const MappedFile> file_;
  size_t data_offset_ = 0;
  bool realigned_ = false;
  std::vector<std::string> names_;
  std::unordered_map<std::string, TensorView> tensors_;
};

// All safetensors files of a checkpoint directory:
//  - model.safetensors.index.json present: its weight_map (name -> file) decides which file holds each tensor;
//    every file it names must exist and parse;
//  - else model.safetensors when present;
//  - else every *.safetensors in the directory (a name found in two files is an error).
class CheckpointFiles {
 public:
  // `keep` (optional): only tensors it accepts are listed, and with an index only the files holding one are opened
  // (e.g. the multi-token-prediction tensors of another checkpoint, without mapping its main shards).
  explicit CheckpointFiles(const std::string& dir, const std::function<bool(const std::string&)>& keep = {});

  const TensorView* find(const std::string& name) const;   // nullptr when absent
  const TensorView& get(const std::string& name) const;    // throws naming the tensor and the files searched
  const std::vector<std::string>& names() const { return names_; }
  std::string files_searched() const;  // "model-00001-of-00003.safetensors, ... in DIR" (for messages)
  const std::string& dir() const { return dir_; }
  bool has_index() const { return has_index_; }
  // Shards read into aligned memory because their data section starts unaligned (file names, for the load log).
  std::vector<std::string> realigned_files() const;
  std::vector<std::shared_ptr<const void>> keep_alive() const;

 private:
  void open_files_with_progress(const std::string& dir);
  std::string dir_;
  bool has_index_ = false;
  std::vector<std::string> file_names_;  // relative to dir_
  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::unordered_map<std::string, size_t> where_;  // tensor name -> index into files_
  std::vector<std::string> names_;
};

}  // namespace lily
