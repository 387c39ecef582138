#include "synth/st_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace lily {

void TensorSink::write(const void* p, size_t n) {
  if (n && std::fwrite(p, 1, n, f) != n) throw Error("writing " + path + ": " + std::strerror(errno));
}

size_t TensorOut::nbytes() const {
  size_t n = dtype_size(dtype);
  for (auto d : shape) n *= size_t(d);
  return n;
}

std::function<void(TensorSink&)> bytes_producer(const void* p, size_t n) {
  return [p, n](TensorSink& s) { s.write(p, n); };
}

void write_safetensors_file(const std::string& path, const std::vector<TensorOut>& tensors) {
  nlohmann::ordered_json h;
  h["__metadata__"] = {{"format", "pt"}};
  size_t off = 0;
  for (const auto& t : tensors) {
    size_t n = t.nbytes();
    h[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string header = h.dump();
  while ((header.size() + 8) % 8) header.push_back(' ');
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error("cannot create " + path + ": " + std::strerror(errno));
  TensorSink sink{f, path};
  try {
    uint64_t len = header.size();
    uint8_t le[8];
    for (int i = 0; i < 8; ++i) le[i] = uint8_t(len >> (8 * i));
    sink.write(le, 8);
    sink.write(header.data(), header.size());
    for (const auto& t : tensors) {
      long before = std::ftell(f);
      t.produce(sink);
      long after = std::ftell(f);
      if (before >= 0 && after >= 0 && size_t(after - before) != t.nbytes())
        throw Error("writing " + path + ": tensor " + t.name + " produced " + std::to_string(after - before) +
                    " bytes, expected " + std::to_string(t.nbytes()));
    }
  } catch (...) {
    std::fclose(f);
    throw;
  }
  if (std::fclose(f) != 0) throw Error("closing " + path + ": " + std::strerror(errno));
}

}  // namespace lily
