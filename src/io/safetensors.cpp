// Safetensors reader (validated header, mmap'd data) and writer.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"

namespace lily {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------- MappedFile

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  if (m->size_ > 0) {
    // Pre-fault the whole mapping (reads the file once, sequentially): otherwise every 4 KiB page of the
    // experts a token happens to route to costs a page fault on first use, which dominated decode time.
    // LILY_MMAP_POPULATE=0 maps lazily instead.
    const char* pop = std::getenv("LILY_MMAP_POPULATE");
    const int flags = MAP_PRIVATE | ((pop && std::strcmp(pop, "0") == 0) ? 0 : MAP_POPULATE);
    void* p = ::mmap(nullptr, m->size_, PROT_READ, flags, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      throw Error(path + ": mmap of " + std::to_string(m->size_) + " bytes failed: " + std::strerror(e));
    }
    m->data_ = static_cast<const uint8_t*>(p);
    m->mapped_ = true;
  }
  ::close(fd);  // the mapping stays valid
  return m;
}

std::shared_ptr<const MappedFile> MappedFile::from_bytes(std::vector<uint8_t> bytes, const std::string& path) {
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->owned_ = std::move(bytes);
  m->data_ = m->owned_.data();
  m->size_ = m->owned_.size();
  return m;
}

MappedFile::~MappedFile() {
  if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

// ---------------------------------------------------------------------------------------------- helpers

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;  // validated at parse time: no overflow
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

namespace {

constexpr int kMaxJsonDepth = 64;

// Rejects pathologically nested JSON before handing it to the parser (safetensors headers have depth 3).
void check_nesting(const char* p, size_t n, const std::string& path) {
  int depth = 0;
  bool in_str = false;
  for (size_t i = 0; i < n; ++i) {
    char c = p[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') in_str = true;
    else if (c == '{' || c == '[') {
      if (++depth > kMaxJsonDepth)
        throw Error(path + ": header JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
}

// Reads a non-negative integer that fits in int64 from a JSON value, or explains what it found.
bool json_uint(const json& v, uint64_t* out, std::string* found) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max())) {
      *found = std::to_string(u) + " (too large)";
      return false;
    }
    *out = u;
    return true;
  }
  if (v.is_number_integer()) *found = std::to_string(v.get<int64_t>()) + " (negative)";
  else *found = std::string("a JSON ") + v.type_name();
  return false;
}

std::string offsets_str(uint64_t b, uint64_t e) {
  std::string s = "[";  // built by appending: GCC 12 -Wrestrict misfires on "[" + std::string
  s += std::to_string(b);
  s += ", ";
  s += std::to_string(e);
  s += "]";
  return s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------- reader

SafetensorsFile::SafetensorsFile(std::shared_ptr<const MappedFile> file) : file_(std::move(file)) {
  const std::string& p = file_->path();
  const size_t size = file_->size();
  if (size < 8)
    throw Error(p + ": file is " + std::to_string(size) +
                " bytes; expected at least 8 (the safetensors header length)");
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | file_->data()[i];
  if (hlen > size - 8)
    throw Error(p + ": header length field says " + std::to_string(hlen) + " bytes; expected at most " +
                std::to_string(size - 8) + " (file size " + std::to_string(size) + " - 8)");
  const char* hb = reinterpret_cast<const char*>(file_->data() + 8);
  check_nesting(hb, size_t(hlen), p);
  json h;
  try {
    h = json::parse(hb, hb + hlen);
  } catch (const json::exception& e) {
    throw Error(p + ": header (" + std::to_string(hlen) + " bytes) is not valid JSON: " + e.what());
  }
  if (!h.is_object())
    throw Error(p + ": header is a JSON " + h.type_name() + "; expected a JSON object");

  const uint8_t* base = file_->data() + 8 + hlen;
  const uint64_t data_size = uint64_t(size) - 8 - hlen;
  struct Span {
    uint64_t b, e;
    const std::string* name;
  };
  std::vector<Span> spans;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    const json& v = it.value();
    auto fail = [&](const std::string& what) { throw Error(p + ": tensor '" + name + "': " + what); };
    if (!v.is_object()) fail(std::string("header entry is a JSON ") + v.type_name() + "; expected an object");
    auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) fail("expected a string 'dtype', found none");
    TensorView t;
    if (!dtype_from_string(dt->get<std::string>(), &t.dtype))
      fail("expected a known dtype, found '" + dt->get<std::string>() + "'");
    if (sh == v.end() || !sh->is_array()) fail("expected an array 'shape', found none");
    uint64_t numel = 1;
    bool overflow = false;
    for (const json& d : *sh) {
      uint64_t u;
      std::string found;
      if (!json_uint(d, &u, &found)) fail("expected non-negative integer dimensions in shape, found " + found);
      t.shape.push_back(int64_t(u));
      if (__builtin_mul_overflow(numel, u, &numel)) overflow = true;
    }
    uint64_t nbytes = 0;
    if (overflow || __builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &nbytes) ||
        numel > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("shape " + shape_str(t.shape) + " overflows the element count");
    if (off == v.end() || !off->is_array() || off->size() != 2)
      fail("expected 'data_offsets' [begin, end], found " +
           (off == v.end() ? std::string("none") : std::string("a JSON ") + off->type_name() +
                                                       (off->is_array() ? " of size " + std::to_string(off->size())
                                                                        : std::string())));
    uint64_t b, e;
    std::string found;
    if (!json_uint((*off)[0], &b, &found) || !json_uint((*off)[1], &e, &found))
      fail("expected non-negative integer data_offsets, found " + found);
    if (b > e) fail("data_offsets " + offsets_str(b, e) + " are not ordered (begin > end)");
    if (e > data_size)
      fail("data_offsets " + offsets_str(b, e) + " end beyond the data section of " + std::to_string(data_size) +
           " bytes (file truncated or offsets corrupt)");
    if (e - b != nbytes)
      fail("shape " + shape_str(t.shape) + " of " + dtype_name(t.dtype) + " needs " + std::to_string(nbytes) +
           " bytes, but data_offsets " + offsets_str(b, e) + " span " + std::to_string(e - b));
    t.nbytes = size_t(nbytes);
    t.data = base + b;
    t.file = p;
    spans.push_back({b, e, &name});
    names_.push_back(name);
    tensors_.emplace(name, std::move(t));
  }
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& c) { return a.b < c.b || (a.b == c.b && a.e < c.e); });
  const Span* prev = nullptr;  // the non-empty span reaching furthest so far
  for (const Span& c : spans) {
    if (c.e == c.b) continue;  // empty tensors occupy no bytes
    if (prev && c.b < prev->e)
      throw Error(p + ": tensor '" + *c.name + "': data_offsets " + offsets_str(c.b, c.e) + " overlap tensor '" +
                  *prev->name + "' at " + offsets_str(prev->b, prev->e) + "; expected disjoint byte ranges");
    prev = &c;
  }
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  return std::make_shared<const SafetensorsFile>(MappedFile::open(path));
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

// ---------------------------------------------------------------------------------------------- writer

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  std::unordered_set<std::string> seen;
  for (const TensorToWrite& t : tensors) {
    auto fail = [&](const std::string& what) { throw Error(path + ": writing tensor '" + t.name + "': " + what); };
    if (!seen.insert(t.name).second) fail("duplicate tensor name");
    if (t.name == "__metadata__") fail("reserved name");
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) fail("negative dimension in shape " + shape_str(t.shape));
      if (__builtin_mul_overflow(numel, uint64_t(d), &numel)) fail("shape " + shape_str(t.shape) + " overflows");
    }
    uint64_t need;
    if (__builtin_mul_overflow(numel, uint64_t(dtype_size(t.dtype)), &need)) fail("byte size overflows");
    if (need != t.nbytes)
      fail("shape " + shape_str(t.shape) + " of " + dtype_name(t.dtype) + " needs " + std::to_string(need) +
           " bytes, got " + std::to_string(t.nbytes));
    if (t.nbytes > 0 && !t.data) fail("null data");
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape},
                 {"data_offsets", nlohmann::ordered_json::array({off, off + t.nbytes})}};
    off += t.nbytes;
  }
  std::string hs;
  try {
    hs = h.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": cannot encode the header: " + e.what());
  }
  while (hs.size() % 8) hs.push_back(' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(hs.data(), 1, hs.size(), f) == hs.size();
  for (const TensorToWrite& t : tensors)
    if (ok && t.nbytes) ok = std::fwrite(t.data, 1, t.nbytes, f) == t.nbytes;
  if (std::fclose(f) != 0) ok = false;
  if (!ok) throw Error(path + ": write failed: " + std::strerror(errno));
}

}  // namespace lily
