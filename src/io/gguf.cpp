// GGUF reader: bounded cursor over the mapping, metadata and tensor records validated before use.
#include "io/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/error.h"

namespace lily {

namespace fs = std::filesystem;

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

bool GgufValue::is_int() const {
  switch (type) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16: case GgufType::U32:
    case GgufType::I32: case GgufType::U64: case GgufType::I64: case GgufType::BOOL: return true;
    default: return false;
  }
}

size_t GgufValue::arr_size() const {
  if (type != GgufType::ARRAY) return 0;
  return ints.size() + floats.size() + strs.size();
}

bool ggml_type_info(uint32_t id, GgmlTypeInfo* out) {
  switch (GgmlType(id)) {
    case GgmlType::F32: *out = {"F32", 1, 4}; return true;
    case GgmlType::F16: *out = {"F16", 1, 2}; return true;
    case GgmlType::BF16: *out = {"BF16", 1, 2}; return true;
    case GgmlType::Q4_0: *out = {"Q4_0", 32, 18}; return true;
    case GgmlType::Q4_1: *out = {"Q4_1", 32, 20}; return true;
    case GgmlType::Q5_0: *out = {"Q5_0", 32, 22}; return true;
    case GgmlType::Q5_1: *out = {"Q5_1", 32, 24}; return true;
    case GgmlType::Q8_0: *out = {"Q8_0", 32, 34}; return true;
    case GgmlType::Q8_1: *out = {"Q8_1", 32, 36}; return true;
    case GgmlType::Q2_K: *out = {"Q2_K", 256, 84}; return true;
    case GgmlType::Q3_K: *out = {"Q3_K", 256, 110}; return true;
    case GgmlType::Q4_K: *out = {"Q4_K", 256, 144}; return true;
    case GgmlType::Q5_K: *out = {"Q5_K", 256, 176}; return true;
    case GgmlType::Q6_K: *out = {"Q6_K", 256, 210}; return true;
    case GgmlType::Q8_K: *out = {"Q8_K", 256, 292}; return true;
  }
  return false;
}

std::string ggml_type_name(uint32_t id) {
  GgmlTypeInfo ti;
  if (ggml_type_info(id, &ti)) return ti.name;
  return "type " + std::to_string(id);
}

std::vector<int64_t> GgufTensor::shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // validated at parse time: no overflow
  return n;
}

namespace {

constexpr uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
constexpr int kMaxDims = 4;
constexpr uint64_t kMaxStringBytes = uint64_t(1) << 30;  // no key, name or value comes close

// Reads little-endian values from [p, end); every read checks the bytes left and throws naming `what`.
class Cursor {
 public:
  Cursor(const uint8_t* p, size_t n, const std::string& path) : base_(p), n_(n), path_(path) {}

  size_t pos() const { return pos_; }
  size_t left() const { return n_ - pos_; }

  template <class T>
  T get(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string str(const std::string& what) {
    const uint64_t len = get<uint64_t>(what + " (string length)");
    if (len > kMaxStringBytes || len > left())
      throw Error(path_ + ": " + what + ": string length " + std::to_string(len) + " at byte " +
                  std::to_string(pos_ - 8) + " runs past the end of the file (" + std::to_string(left()) +
                  " bytes left)");
    std::string s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
    pos_ += size_t(len);
    return s;
  }

  void need(size_t k, const std::string& what) const {
    if (k > left())
      throw Error(path_ + ": " + what + ": needs " + std::to_string(k) + " bytes at byte " + std::to_string(pos_) +
                  ", file truncated (" + std::to_string(n_) + " bytes)");
  }

 private:
  const uint8_t* base_;
  size_t n_;
  size_t pos_ = 0;
  const std::string& path_;
};

size_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    default: return 0;
  }
}

bool known_type(uint32_t t) { return t <= uint32_t(GgufType::F64); }

// Reads one scalar of type `t` into v (integers to v->i, floats to v->f); `what` names the key for errors.
void read_scalar(Cursor& c, GgufType t, const std::string& what, const std::string& path, int64_t* iv, double* fv) {
  switch (t) {
    case GgufType::U8: *iv = c.get<uint8_t>(what); return;
    case GgufType::I8: *iv = c.get<int8_t>(what); return;
    case GgufType::U16: *iv = c.get<uint16_t>(what); return;
    case GgufType::I16: *iv = c.get<int16_t>(what); return;
    case GgufType::U32: *iv = c.get<uint32_t>(what); return;
    case GgufType::I32: *iv = c.get<int32_t>(what); return;
    case GgufType::I64: *iv = c.get<int64_t>(what); return;
    case GgufType::U64: {
      const uint64_t u = c.get<uint64_t>(what);
      if (u > uint64_t(std::numeric_limits<int64_t>::max()))
        throw Error(path + ": " + what + ": u64 value " + std::to_string(u) + " is too large");
      *iv = int64_t(u);
      return;
    }
    case GgufType::BOOL: {
      const uint8_t b = c.get<uint8_t>(what);
      if (b > 1) throw Error(path + ": " + what + ": bool value " + std::to_string(b) + " is neither 0 nor 1");
      *iv = b;
      return;
    }
    case GgufType::F32: *fv = c.get<float>(what); return;
    case GgufType::F64: *fv = c.get<double>(what); return;
    default: throw Error(path + ": " + what + ": not a scalar type");
  }
}

GgufValue read_value(Cursor& c, GgufType t, const std::string& what, const std::string& path) {
  GgufValue v;
  v.type = t;
  if (t == GgufType::STRING) {
    v.s = c.str(what);
    return v;
  }
  if (t != GgufType::ARRAY) {
    read_scalar(c, t, what, path, &v.i, &v.f);
    return v;
  }
  const uint32_t et = c.get<uint32_t>(what + " (array element type)");
  if (!known_type(et))
    throw Error(path + ": " + what + ": unknown array element type " + std::to_string(et));
  v.arr_type = GgufType(et);
  if (v.arr_type == GgufType::ARRAY) throw Error(path + ": " + what + ": nested arrays are not supported");
  const uint64_t n = c.get<uint64_t>(what + " (array length)");
  // Every element takes at least one byte (a string at least eight): bound the count before reserving.
  const size_t min_elem = v.arr_type == GgufType::STRING ? 8 : scalar_size(v.arr_type);
  if (n > c.left() / min_elem)
    throw Error(path + ": " + what + ": array of " + std::to_string(n) + " " + gguf_type_name(v.arr_type) +
                " elements does not fit in the " + std::to_string(c.left()) + " bytes left in the file");
  if (v.arr_type == GgufType::STRING) {
    v.strs.reserve(size_t(n));
    for (uint64_t k = 0; k < n; ++k) v.strs.push_back(c.str(what + "[" + std::to_string(k) + "]"));
  } else if (v.arr_type == GgufType::F32 || v.arr_type == GgufType::F64) {
    v.floats.resize(size_t(n));
    int64_t dummy = 0;
    for (uint64_t k = 0; k < n; ++k) read_scalar(c, v.arr_type, what, path, &dummy, &v.floats[size_t(k)]);
  } else {
    v.ints.resize(size_t(n));
    double dummy = 0;
    for (uint64_t k = 0; k < n; ++k) read_scalar(c, v.arr_type, what, path, &v.ints[size_t(k)], &dummy);
  }
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- GgufFile

GgufFile::GgufFile(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {
  const std::string& path = file_->path();
  Cursor c(file_->data(), file_->size(), path);
  const uint32_t magic = c.get<uint32_t>("magic");
  if (magic != kMagic) throw Error(path + ": not a GGUF file (the first four bytes are not \"GGUF\")");
  version_ = c.get<uint32_t>("version");
  if (version_ != 3)
    throw Error(path + ": GGUF version " + std::to_string(version_) + " is not supported (expected 3)");
  const uint64_t n_tensors = c.get<uint64_t>("tensor count");
  const uint64_t n_kv = c.get<uint64_t>("metadata count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes, a tensor record at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > c.left() / 13)
    throw Error(path + ": metadata count " + std::to_string(n_kv) + " cannot fit in a file of " +
                std::to_string(file_->size()) + " bytes");
  if (n_tensors > c.left() / 32)
    throw Error(path + ": tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " +
                std::to_string(file_->size()) + " bytes");

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string key = c.str("metadata key #" + std::to_string(k));
    if (key.empty()) throw Error(path + ": metadata key #" + std::to_string(k) + " is empty");
    const std::string what = "metadata key '" + key + "'";
    const uint32_t t = c.get<uint32_t>(what + " (value type)");
    if (!known_type(t)) throw Error(path + ": " + what + ": unknown value type " + std::to_string(t));
    GgufValue v = read_value(c, GgufType(t), what, path);
    if (kv_.count(key)) throw Error(path + ": " + what + " appears twice");
    keys_.push_back(key);
    kv_.emplace(key, std::move(v));
  }
  if (const GgufValue* a = kv("general.alignment")) {
    if (!a->is_int() || a->type == GgufType::BOOL || a->i <= 0 || a->i > (1 << 30) || (a->i & (a->i - 1)) != 0)
      throw Error(path + ": metadata key 'general.alignment' must be a power of two, found " +
                  (a->is_int() ? std::to_string(a->i) : std::string("a ") + gguf_type_name(a->type)));
    alignment_ = uint32_t(a->i);
  }

  std::vector<GgufTensor> recs;
  recs.reserve(size_t(n_tensors));
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.str("tensor record #" + std::to_string(k) + " (name)");
    if (t.name.empty()) throw Error(path + ": tensor record #" + std::to_string(k) + " has an empty name");
    const std::string what = "tensor '" + t.name + "'";
    const uint32_t nd = c.get<uint32_t>(what + " (dimension count)");
    if (nd < 1 || nd > kMaxDims)
      throw Error(path + ": " + what + ": " + std::to_string(nd) + " dimensions (expected 1 to 4)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t e = c.get<uint64_t>(what + " (dimension " + std::to_string(d) + ")");
      if (e > uint64_t(std::numeric_limits<int64_t>::max()) || (e && numel > uint64_t(INT64_MAX) / e))
        throw Error(path + ": " + what + ": dimension " + std::to_string(d) + " = " + std::to_string(e) +
                    " makes the element count overflow");
      numel *= e;
      t.ne.push_back(int64_t(e));
    }
    t.type = c.get<uint32_t>(what + " (type)");
    GgmlTypeInfo ti;
    if (!ggml_type_info(t.type, &ti))
      throw Error(path + ": " + what + ": unsupported ggml type id " + std::to_string(t.type));
    if (t.ne[0] % ti.block != 0)
      throw Error(path + ": " + what + ": innermost dimension " + std::to_string(t.ne[0]) + " is not a multiple of " +
                  ti.name + "'s block of " + std::to_string(ti.block));
    const uint64_t blocks = numel / uint64_t(ti.block);
    if (blocks > uint64_t(INT64_MAX) / uint64_t(ti.bytes))
      throw Error(path + ": " + what + ": byte size overflows");
    t.nbytes = size_t(blocks * uint64_t(ti.bytes));
    t.offset = c.get<uint64_t>(what + " (offset)");
    if (t.offset % alignment_ != 0)
      throw Error(path + ": " + what + ": offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
                  std::to_string(alignment_));
    t.file = path;
    recs.push_back(std::move(t));
  }
  const size_t hdr_end = c.pos();
  data_offset_ = (hdr_end + alignment_ - 1) / alignment_ * alignment_;
  if (data_offset_ > file_->size() && !recs.empty())
    throw Error(path + ": the data section would start at byte " + std::to_string(data_offset_) +
                ", past the end of the file (" + std::to_string(file_->size()) + " bytes)");
  const uint64_t data_size = data_offset_ <= file_->size() ? uint64_t(file_->size() - data_offset_) : 0;

  // Offsets inside the data section, no two tensors overlapping.
  std::vector<size_t> order(recs.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return recs[a].offset < recs[b].offset; });
  uint64_t prev_end = 0;
  std::string prev_name;
  for (size_t k : order) {
    GgufTensor& t = recs[k];
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      throw Error(path + ": tensor '" + t.name + "': bytes [" + std::to_string(t.offset) + ", " +
                  std::to_string(t.offset + t.nbytes) + ") of the data section run past its end (" +
                  std::to_string(data_size) + " bytes, file truncated?)");
    if (t.offset < prev_end)
      throw Error(path + ": tensor '" + t.name + "' overlaps tensor '" + prev_name + "' in the data section");
    prev_end = t.offset + t.nbytes;
    prev_name = t.name;
    t.data = file_->data() + data_offset_ + t.offset;
  }
  for (GgufTensor& t : recs) {
    if (tensors_.count(t.name)) throw Error(path + ": tensor '" + t.name + "' appears twice");
    names_.push_back(t.name);
    std::string n = t.name;
    tensors_.emplace(std::move(n), std::move(t));
  }
}

std::shared_ptr<const GgufFile> GgufFile::open(const std::string& path) {
  return std::make_shared<const GgufFile>(MappedFile::open(path));
}

const GgufValue* GgufFile::kv(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

const GgufTensor* GgufFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------------------------- split files

bool gguf_split_name(const std::string& path, int* no, int* count, std::string* prefix) {
  // PREFIX-NNNNN-of-MMMMM.gguf
  static const size_t kTail = std::strlen("-00001-of-00003.gguf");
  if (path.size() <= kTail) return false;
  const std::string tail = path.substr(path.size() - kTail);
  auto digits = [&](size_t b) {
    int v = 0;
    for (size_t i = b; i < b + 5; ++i) {
      if (tail[i] < '0' || tail[i] > '9') return -1;
      v = v * 10 + (tail[i] - '0');
    }
    return v;
  };
  if (tail[0] != '-' || tail.compare(6, 4, "-of-") != 0 || tail.compare(15, 5, ".gguf") != 0) return false;
  const int a = digits(1), b = digits(10);
  if (a < 1 || b < 1 || a > b) return false;
  *no = a;
  *count = b;
  *prefix = path.substr(0, path.size() - kTail);
  return true;
}

std::string gguf_split_path(const std::string& prefix, int no, int count) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "-%05d-of-%05d.gguf", no, count);
  return prefix + buf;
}

GgufModel::GgufModel(const std::string& path) {
  int no = 0, count = 0;
  std::string prefix;
  std::vector<std::string> paths;
  if (gguf_split_name(path, &no, &count, &prefix)) {
    for (int k = 1; k <= count; ++k) paths.push_back(gguf_split_path(prefix, k, count));
  } else {
    paths.push_back(path);
  }
  for (size_t k = 0; k < paths.size(); ++k) {
    std::error_code ec;
    if (paths.size() > 1 && !fs::exists(paths[k], ec))
      throw Error(paths[k] + ": split part " + std::to_string(k + 1) + " of " + std::to_string(paths.size()) +
                  " is missing (opening " + path + ")");
    parts_.push_back(GgufFile::open(paths[k]));
    const GgufFile& f = *parts_.back();
    if (paths.size() > 1) {
      const GgufValue* sn = f.kv("split.no");
      const GgufValue* sc = f.kv("split.count");
      if (!sn || !sn->is_int() || sn->i != int64_t(k))
        throw Error(f.path() + ": metadata key 'split.no' should be " + std::to_string(k) + " for part " +
                    std::to_string(k + 1) + (sn && sn->is_int() ? ", found " + std::to_string(sn->i) : ", absent"));
      if (!sc || !sc->is_int() || sc->i != int64_t(paths.size()))
        throw Error(f.path() + ": metadata key 'split.count' should be " + std::to_string(paths.size()));
    } else if (const GgufValue* sc = f.kv("split.count"); sc && sc->is_int() && sc->i > 1) {
      throw Error(f.path() + ": the file is part of a split model (split.count " + std::to_string(sc->i) +
                  ") but its name does not end in -NNNNN-of-MMMMM.gguf");
    }
    for (const std::string& n : f.names()) {
      if (where_.count(n))
        throw Error(f.path() + ": tensor '" + n + "' also appears in " + parts_[where_[n]]->path());
      where_[n] = k;
      names_.push_back(n);
    }
  }
}

GgufModel::GgufModel(std::shared_ptr<const GgufFile> file) {
  if (!file) throw Error("GgufModel: no file");
  if (const GgufValue* sc = file->kv("split.count"); sc && sc->is_int() && sc->i > 1)
    throw Error(file->path() + ": the file is part of a split model (split.count " + std::to_string(sc->i) + ")");
  for (const std::string& n : file->names()) {
    where_[n] = 0;
    names_.push_back(n);
  }
  parts_.push_back(std::move(file));
}

const GgufTensor* GgufModel::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : parts_[it->second]->find(name);
}

const GgufTensor& GgufModel::get(const std::string& name) const {
  if (const GgufTensor* t = find(name)) return *t;
  throw Error("tensor '" + name + "' not found in " + files_str());
}

std::string GgufModel::files_str() const {
  std::string s;
  for (const auto& p : parts_) {
    if (!s.empty()) s += ", ";
    s += p->path();
  }
  return s;
}

std::vector<std::shared_ptr<const void>> GgufModel::keep_alive() const {
  return std::vector<std::shared_ptr<const void>>(parts_.begin(), parts_.end());
}

namespace {
const GgufValue& need_kv(const GgufModel& m, const std::string& key) {
  const GgufValue* v = m.kv(key);
  if (!v) throw Error(m.first().path() + ": metadata key '" + key + "' is missing");
  return *v;
}
}  // namespace

int64_t GgufModel::get_int(const std::string& key) const {
  const GgufValue& v = need_kv(*this, key);
  if (!v.is_int())
    throw Error(first().path() + ": metadata key '" + key + "': expected an integer, found " + gguf_type_name(v.type));
  return v.i;
}

int64_t GgufModel::get_int(const std::string& key, int64_t dflt) const { return kv(key) ? get_int(key) : dflt; }

double GgufModel::get_float(const std::string& key) const {
  const GgufValue& v = need_kv(*this, key);
  if (v.is_float()) return v.f;
  if (v.is_int() && v.type != GgufType::BOOL) return double(v.i);
  throw Error(first().path() + ": metadata key '" + key + "': expected a number, found " + gguf_type_name(v.type));
}

double GgufModel::get_float(const std::string& key, double dflt) const { return kv(key) ? get_float(key) : dflt; }

std::string GgufModel::get_string(const std::string& key) const {
  const GgufValue& v = need_kv(*this, key);
  if (v.type != GgufType::STRING)
    throw Error(first().path() + ": metadata key '" + key + "': expected a string, found " + gguf_type_name(v.type));
  return v.s;
}

}  // namespace lily
