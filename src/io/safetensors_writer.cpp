// The safetensors writer: padded (Python safetensors) or compact (MLX) headers, streamed tensor bytes.
#include "io/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.h"
#include "io/safetensors.h"

namespace lily {

void TensorSink::write(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f) != n) throw Error(path + ": write failed: " + std::strerror(errno));
  written += n;
}

uint64_t TensorOut::nbytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error("tensor '" + name + "': negative dimension in shape " + shape_str(shape));
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) throw Error("tensor '" + name + "': shape " + shape_str(shape) + " overflows");
  }
  uint64_t b;
  if (__builtin_mul_overflow(n, uint64_t(dtype_size(dtype)), &b)) throw Error("tensor '" + name + "': byte size overflows");
  return b;
}

std::function<void(TensorSink&)> bytes_producer(const void* p, size_t n) {
  return [p, n](TensorSink& s) { s.write(p, n); };
}

namespace {

// The header JSON: `J` is nlohmann::ordered_json (keys in insertion order) or nlohmann::json (keys sorted).
template <class J>
std::string header_json(const std::string& path, const std::vector<TensorOut>& tensors, const char* format) {
  J h = J::object();
  h["__metadata__"] = J{{"format", format}};
  uint64_t off = 0;
  std::unordered_set<std::string> seen;
  for (const TensorOut& t : tensors) {
    auto fail = [&](const std::string& what) { throw Error(path + ": writing tensor '" + t.name + "': " + what); };
    if (!seen.insert(t.name).second) fail("duplicate tensor name");
    if (t.name == "__metadata__") fail("reserved name");
    if (!t.produce) fail("no data");
    uint64_t n;
    try {
      n = t.nbytes();
    } catch (const Error& e) {
      fail(e.what());
    }
    h[t.name] = J{{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", J::array({off, off + n})}};
    off += n;
  }
  try {
    return h.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": cannot encode the header: " + e.what());
  }
}

}  // namespace

void write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors, SafetensorsStyle style) {
  std::string hs = style == SafetensorsStyle::Mlx ? header_json<nlohmann::json>(path, tensors, "mlx")
                                                  : header_json<nlohmann::ordered_json>(path, tensors, "pt");
  if (style == SafetensorsStyle::Padded)
    while (hs.size() % 8) hs.push_back(' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  TensorSink sink{f, path};
  try {
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(hs.size()) >> (8 * i));
    sink.write(len, 8);
    sink.write(hs.data(), hs.size());
    for (const TensorOut& t : tensors) {
      const uint64_t before = sink.written;
      t.produce(sink);
      if (sink.written - before != t.nbytes())
        throw Error(path + ": writing tensor '" + t.name + "': produced " + std::to_string(sink.written - before) +
                    " bytes, expected " + std::to_string(t.nbytes()));
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) throw Error(path + ": write failed: " + std::strerror(errno));
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors, SafetensorsStyle style) {
  std::vector<TensorOut> outs;
  for (const TensorToWrite& t : tensors) {
    TensorOut o{t.name, t.dtype, t.shape, nullptr};
    uint64_t need = 0;
    try {
      need = o.nbytes();
    } catch (const Error& e) {
      throw Error(path + ": writing tensor '" + t.name + "': " + e.what());
    }
    if (need != t.nbytes)
      throw Error(path + ": writing tensor '" + t.name + "': shape " + shape_str(t.shape) + " of " + dtype_name(t.dtype) +
                  " needs " + std::to_string(need) + " bytes, got " + std::to_string(t.nbytes));
    if (t.nbytes > 0 && !t.data) throw Error(path + ": writing tensor '" + t.name + "': null data");
    o.produce = bytes_producer(t.data, t.nbytes);
    outs.push_back(std::move(o));
  }
  write_safetensors_file(path, outs, style);
}

}  // namespace lily
