// GGUF files (llama.cpp's single-file model format, version 3): a read-only memory-mapped reader that validates
// the header, every metadata key/value and every tensor record before handing out views, and a model made of
// one file or of split files "NAME-00001-of-00003.gguf".
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, n_kv x {string key, u32 type, value},
// n_tensors x {string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset}, padding to the alignment
// (general.alignment, default 32), then the data section; a tensor's offset is relative to that section.
// A string is {u64 length, bytes}; an array is {u32 element type, u64 count, elements}.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/safetensors.h"  // MappedFile

namespace lily {

// Metadata value types as stored in the file.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, U64 = 10,
  I64 = 11, F64 = 12
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars: integers in `i` (u64 values above INT64_MAX are rejected at parse), floats in
// `f`, bools in `i` (0/1); strings in `s`. Arrays: `arr_type` and, by element kind, `ints`, `floats` or `strs`
// (nested arrays are rejected: no llama.cpp key uses them).
struct GgufValue {
  GgufType type = GgufType::U32;
  int64_t i = 0;
  double f = 0.0;
  std::string s;
  GgufType arr_type = GgufType::U32;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strs;

  bool is_int() const;      // any integer type or BOOL
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  size_t arr_size() const;  // element count of an array (0 for scalars)
};

// ggml tensor element types found in GGUF files (ids as ggml numbers them).
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10, Q3_K = 11, Q4_K = 12,
  Q5_K = 13, Q6_K = 14, Q8_K = 15, BF16 = 30
};

// Block geometry: `block` elements take `bytes` bytes (F32: 1 element, 4 bytes; Q4_K: 256 elements, 144 bytes).
struct GgmlTypeInfo {
  const char* name = "";
  int block = 0;
  int bytes = 0;
};
// False for ids this reader does not know (the caller names the id in its error).
bool ggml_type_info(uint32_t id, GgmlTypeInfo* out);
std::string ggml_type_name(uint32_t id);  // "Q4_K", or "type 77" when unknown

// One tensor record; `data` points into the file's mapping, `nbytes` = prod(ne) / block * bytes.
struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;   // ggml order: ne[0] is the innermost (contiguous) dimension
  uint32_t type = 0;         // GgmlType id
  uint64_t offset = 0;       // relative to the data section
  const uint8_t* data = nullptr;
  size_t nbytes = 0;
  std::string file;

  std::vector<int64_t> shape() const;  // row-major (outermost first), i.e. ne reversed
  int64_t numel() const;
};

// A parsed GGUF file. Construction validates: magic, version 3, counts bounded by the file size, every string
// and array inside the file, known value types, unique keys, general.alignment a power of two, tensor names
// unique and non-empty, 1..4 dimensions, each >= 0, element count without overflow, ne[0] a multiple of the
// type's block, known ggml types, offsets aligned, inside the data section and not overlapping. Any violation
// throws lily::Error naming the file and the key or tensor.
class GgufFile {
 public:
  explicit GgufFile(std::shared_ptr<const MappedFile> file);
  static std::shared_ptr<const GgufFile> open(const std::string& path);

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  // start of the data section in the file
  const GgufValue* kv(const std::string& key) const;    // nullptr when absent
  const std::vector<std::string>& keys() const { return keys_; }  // in file order
  const GgufTensor* find(const std::string& name) const;
  const std::vector<std::string>& names() const { return names_; }  // in file order
  const std::string& path() const { return file_->path(); }
  const std::shared_ptr<const MappedFile>& mapping() const { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, GgufValue> kv_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, GgufTensor> tensors_;
};

// A model stored as one GGUF file or as split files. Given any path, a name matching "-NNNNN-of-MMMMM.gguf"
// opens all MMMMM parts (each must exist, carry split.no = its index and split.count = MMMMM, and a tensor
// name may appear in one part only); metadata comes from the first part.
class GgufModel {
 public:
  explicit GgufModel(const std::string& path);
  // One file already parsed (e.g. one made in memory from MappedFile::from_bytes); not part of a split model.
  explicit GgufModel(std::shared_ptr<const GgufFile> file);

  const GgufValue* kv(const std::string& key) const { return parts_.front()->kv(key); }
  const GgufFile& first() const { return *parts_.front(); }
  const GgufTensor* find(const std::string& name) const;
  const GgufTensor& get(const std::string& name) const;  // throws naming the tensor and the files
  const std::vector<std::string>& names() const { return names_; }
  std::string files_str() const;  // "a.gguf" or "a-00001-of-00002.gguf, a-00002-of-00002.gguf"
  std::vector<std::shared_ptr<const void>> keep_alive() const;

  // Typed metadata access; each throws lily::Error naming the key and the file when absent or mistyped.
  int64_t get_int(const std::string& key) const;
  int64_t get_int(const std::string& key, int64_t dflt) const;  // dflt when absent
  double get_float(const std::string& key) const;
  double get_float(const std::string& key, double dflt) const;
  std::string get_string(const std::string& key) const;

 private:
  std::vector<std::shared_ptr<const GgufFile>> parts_;
  std::unordered_map<std::string, size_t> where_;
  std::vector<std::string> names_;
};

// "model-00002-of-00003.gguf" -> {2, 3, "model"}; false when the name does not follow the split pattern.
bool gguf_split_name(const std::string& path, int* no, int* count, std::string* prefix);
std::string gguf_split_path(const std::string& prefix, int no, int count);

}  // namespace lily
