#include "eval/tensor_file.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace lily {

TensorFile::TensorFile(const std::string& path) : path_(path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("cannot open " + path);
  uint8_t le[8];
  if (!f.read(reinterpret_cast<char*>(le), 8)) throw Error(path + ": too short for a safetensors file");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(le[i]) << (8 * i);
  const uint64_t size = std::filesystem::file_size(path);
  if (n > size - 8) throw Error(path + ": header length " + std::to_string(n) + " exceeds the file size");
  std::string header(n, '\0');
  if (!f.read(header.data(), std::streamsize(n))) throw Error(path + ": truncated header");
  data_start_ = 8 + n;
  nlohmann::json h;
  try {
    h = nlohmann::json::parse(header);
  } catch (const std::exception& e) {
    throw Error(path + ": header is not JSON: " + e.what());
  }
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const auto& v = it.value();
    Info info;
    std::string dt = v.value("dtype", "");
    if (!dtype_from_string(dt, &info.dtype)) throw Error(path + ": tensor " + it.key() + " has unknown dtype '" + dt + "'");
    info.shape = v.at("shape").get<std::vector<int64_t>>();
    auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
    if (off.size() != 2 || off[1] < off[0] || data_start_ + off[1] > size)
      throw Error(path + ": tensor " + it.key() + " has data_offsets outside the file");
    uint64_t expect = dtype_size(info.dtype);
    for (auto d : info.shape) expect *= uint64_t(d);
    if (off[1] - off[0] != expect)
      throw Error(path + ": tensor " + it.key() + " holds " + std::to_string(off[1] - off[0]) + " bytes, shape needs " +
                  std::to_string(expect));
    info.begin = off[0];
    info.end = off[1];
    infos_[it.key()] = info;
  }
}

const TensorFile::Info& TensorFile::info(const std::string& name) const {
  auto it = infos_.find(name);
  if (it == infos_.end()) throw Error(path_ + ": no tensor named '" + name + "'");
  return it->second;
}

std::vector<std::string> TensorFile::names() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : infos_) out.push_back(k);
  return out;
}

std::vector<uint8_t> TensorFile::raw(const std::string& name) const {
  const auto& in = info(name);
  std::vector<uint8_t> out(in.end - in.begin);
  std::ifstream f(path_, std::ios::binary);
  f.seekg(std::streamoff(data_start_ + in.begin));
  if (!f.read(reinterpret_cast<char*>(out.data()), std::streamsize(out.size())))
    throw Error(path_ + ": reading tensor " + name + " failed");
  return out;
}

std::vector<float> TensorFile::f32(const std::string& name) const {
  if (info(name).dtype != DType::F32)
    throw Error(path_ + ": tensor " + name + " is " + dtype_name(info(name).dtype) + ", expected F32");
  auto r = raw(name);
  std::vector<float> out(r.size() / 4);
  std::memcpy(out.data(), r.data(), r.size());
  return out;
}

std::vector<int32_t> TensorFile::i32(const std::string& name) const {
  if (info(name).dtype != DType::I32)
    throw Error(path_ + ": tensor " + name + " is " + dtype_name(info(name).dtype) + ", expected I32");
  auto r = raw(name);
  std::vector<int32_t> out(r.size() / 4);
  std::memcpy(out.data(), r.data(), r.size());
  return out;
}

}  // namespace lily
