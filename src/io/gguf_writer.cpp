// GGUF writer: header, metadata, tensor records, padding, data section (each tensor aligned).
#include "io/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace lily {

namespace {

// resize + memcpy (GCC 12's -Wstringop-overflow misfires on vector::insert of a small array at -O2).
void put_bytes(std::vector<uint8_t>& b, const void* p, size_t n) {
  const size_t at = b.size();
  b.resize(at + n);
  if (n) std::memcpy(b.data() + at, p, n);
}

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  put_bytes(b, &v, sizeof(T));
}

void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  put_bytes(b, s.data(), s.size());
}

}  // namespace

void GgufWriter::key(const std::string& k, GgufType t) {
  put_str(kv_, k);
  put<uint32_t>(kv_, uint32_t(t));
  ++n_kv_;
}

void GgufWriter::add_u32(const std::string& k, uint32_t v) { key(k, GgufType::U32); put(kv_, v); }
void GgufWriter::add_i32(const std::string& k, int32_t v) { key(k, GgufType::I32); put(kv_, v); }
void GgufWriter::add_u64(const std::string& k, uint64_t v) { key(k, GgufType::U64); put(kv_, v); }
void GgufWriter::add_f32(const std::string& k, float v) { key(k, GgufType::F32); put(kv_, v); }
void GgufWriter::add_bool(const std::string& k, bool v) { key(k, GgufType::BOOL); put<uint8_t>(kv_, v ? 1 : 0); }
void GgufWriter::add_string(const std::string& k, const std::string& v) { key(k, GgufType::STRING); put_str(kv_, v); }

void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& v) {
  key(k, GgufType::ARRAY);
  put<uint32_t>(kv_, uint32_t(GgufType::STRING));
  put<uint64_t>(kv_, v.size());
  for (const std::string& s : v) put_str(kv_, s);
}

void GgufWriter::add_i32s(const std::string& k, const std::vector<int32_t>& v) {
  key(k, GgufType::ARRAY);
  put<uint32_t>(kv_, uint32_t(GgufType::I32));
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put(kv_, x);
}

void GgufWriter::add_f32s(const std::string& k, const std::vector<float>& v) {
  key(k, GgufType::ARRAY);
  put<uint32_t>(kv_, uint32_t(GgufType::F32));
  put<uint64_t>(kv_, v.size());
  for (float x : v) put(kv_, x);
}

void GgufWriter::add_bools(const std::string& k, const std::vector<bool>& v) {
  key(k, GgufType::ARRAY);
  put<uint32_t>(kv_, uint32_t(GgufType::BOOL));
  put<uint64_t>(kv_, v.size());
  for (bool x : v) put<uint8_t>(kv_, x ? 1 : 0);
}

size_t GgufWriter::tensor_bytes(const std::string& name, GgmlType type, const std::vector<int64_t>& shape) {
  GgmlTypeInfo ti;
  if (!ggml_type_info(uint32_t(type), &ti)) throw Error("gguf writer: tensor '" + name + "': unknown type");
  if (shape.empty() || shape.size() > 4) throw Error("gguf writer: tensor '" + name + "': 1 to 4 dimensions expected");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  if (shape.back() % ti.block != 0)
    throw Error("gguf writer: tensor '" + name + "': " + shape_str(shape) + " does not fit " + ti.name + " blocks");
  return size_t(n / ti.block * ti.bytes);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                            std::vector<uint8_t> bytes) {
  const size_t nb = tensor_bytes(name, type, shape);
  if (nb != bytes.size())
    throw Error("gguf writer: tensor '" + name + "': " + std::to_string(bytes.size()) + " bytes do not hold " +
                shape_str(shape) + " of " + ggml_type_name(uint32_t(type)));
  tensors_.push_back({name, uint32_t(type), std::vector<int64_t>(shape.rbegin(), shape.rend()), std::move(bytes), nb, {}});
}

void GgufWriter::add_tensor_stream(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                                   std::function<void(const Emit&)> producer) {
  const size_t nb = tensor_bytes(name, type, shape);
  tensors_.push_back({name, uint32_t(type), std::vector<int64_t>(shape.rbegin(), shape.rend()), {}, nb,
                      std::move(producer)});
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 0x46554747u);
  put<uint32_t>(b, 3);
  put<uint64_t>(b, tensors_.size());
  const bool custom_align = alignment_ != 32;
  put<uint64_t>(b, n_kv_ + (custom_align ? 1 : 0));
  if (custom_align) {
    put_str(b, "general.alignment");
    put<uint32_t>(b, uint32_t(GgufType::U32));
    put<uint32_t>(b, alignment_);
  }
  put_bytes(b, kv_.data(), kv_.size());
  auto pad = [&](uint64_t x) { return (x + alignment_ - 1) / alignment_ * alignment_; };
  uint64_t off = 0;
  for (const Tensor& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(b, uint64_t(d));
    put<uint32_t>(b, t.type);
    put<uint64_t>(b, off);
    off = pad(off + t.nbytes);
  }
  b.resize(size_t(pad(b.size())), 0);
  return b;
}

namespace {

// Runs one tensor's producer (or copies its bytes) into `out`, then pads; checks the byte count.
void emit_tensor(const std::string& name, size_t nbytes, const std::vector<uint8_t>& bytes,
                 const std::function<void(const GgufWriter::Emit&)>& producer, uint32_t align,
                 const GgufWriter::Emit& out) {
  size_t n = 0;
  const GgufWriter::Emit counted = [&](const void* p, size_t k) {
    n += k;
    if (n > nbytes) throw Error("gguf writer: tensor '" + name + "': producer wrote more than " + std::to_string(nbytes) + " bytes");
    out(p, k);
  };
  if (producer) producer(counted);
  else counted(bytes.data(), bytes.size());
  if (n != nbytes)
    throw Error("gguf writer: tensor '" + name + "': producer wrote " + std::to_string(n) + " of " + std::to_string(nbytes) + " bytes");
  static const uint8_t zeros[256] = {};
  const size_t padn = (align - nbytes % align) % align;
  for (size_t left = padn; left > 0;) {
    const size_t k = left < sizeof zeros ? left : sizeof zeros;
    out(zeros, k);
    left -= k;
  }
}

}  // namespace

uint64_t GgufWriter::file_size() const {
  uint64_t n = header().size();
  for (const Tensor& t : tensors_) n += (t.nbytes + alignment_ - 1) / alignment_ * alignment_;
  return n;
}

std::vector<uint8_t> GgufWriter::bytes() const {
  std::vector<uint8_t> b = header();
  b.reserve(size_t(file_size()));
  const Emit out = [&](const void* p, size_t n) { put_bytes(b, p, n); };
  for (const Tensor& t : tensors_) emit_tensor(t.name, t.nbytes, t.bytes, t.producer, alignment_, out);
  return b;
}

void GgufWriter::write(const std::string& path) const {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot open for writing");
  bool ok = true;
  const Emit out = [&](const void* p, size_t n) {
    if (ok && n && std::fwrite(p, 1, n, f) != n) ok = false;
  };
  try {
    const std::vector<uint8_t> h = header();
    out(h.data(), h.size());
    for (const Tensor& t : tensors_) emit_tensor(t.name, t.nbytes, t.bytes, t.producer, alignment_, out);
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0 || !ok) throw Error(path + ": write failed");
}

}  // namespace lily
