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

std::shared_ptr<const MappedFile> MappedFile::read_aligned_at(const std::string& path, size_t at) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->path_ = path;
  m->size_ = size_t(st.st_size);
  constexpr size_t kAlign = 64;
  m->owned_.resize(m->size_ + kAlign);
  const auto base = reinterpret_cast<uintptr_t>(m->owned_.data());
  const size_t shift = (kAlign - (base + at) % kAlign) % kAlign;
  uint8_t* dst = m->owned_.data() + shift;
  size_t done = 0;
  while (done < m->size_) {
    const ssize_t r = ::pread(fd, dst + done, m->size_ - done, off_t(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int e = errno;
      ::close(fd);
      throw Error(path + ": read failed after " + std::to_string(done) + " of " + std::to_string(m->size_) +
                  " bytes: " + (r == 0 ? std::string("unexpected end of file") : std::strerror(e)));
    }
    done += size_t(r);
  }
  ::close(fd);
  m->data_ = dst;
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

  data_offset_ = size_t(8 + hlen);
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
  // Peek at the header length (without mapping) to choose between mapping and an aligned read.
  uint64_t hlen = 0, size = 0;
  bool peeked = false;
  if (int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    struct stat st;
    uint8_t b[8];
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, b, 8, 0) == 8) {
      size = uint64_t(st.st_size);
      for (int i = 7; i >= 0; --i) hlen = (hlen << 8) | b[i];
      peeked = true;
    }
    ::close(fd);
  }
  if (!peeked || hlen > size - 8 || (8 + hlen) % 8 == 0)
    return std::make_shared<const SafetensorsFile>(MappedFile::open(path));  // aligned, or the constructor says why
  auto f = std::make_shared<SafetensorsFile>(MappedFile::read_aligned_at(path, size_t(8 + hlen)));
  f->realigned_ = true;
  return f;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace lily
