#include "model/weight_reader.h"

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace lily {

namespace {

std::string base_name(const std::string& path) { return std::filesystem::path(path).filename().string(); }

std::string where(const TensorView& t, const std::string& name) {
  return base_name(t.file) + ": tensor '" + name + "'";
}

std::string dtype_list(std::initializer_list<DType> allowed) {
  std::string s;
  size_t i = 0;
  for (DType d : allowed) {
    if (i) s += (i + 1 == allowed.size()) ? " or " : ", ";
    s += dtype_name(d);
    ++i;
  }
  return s;
}

void check_dtype(const TensorView& t, const std::string& name, std::initializer_list<DType> allowed) {
  for (DType d : allowed)
    if (t.dtype == d) return;
  throw Error(where(t, name) + ": expected dtype " + dtype_list(allowed) + ", found " + dtype_name(t.dtype));
}

void check_shape(const TensorView& t, const std::string& name, const std::vector<int64_t>& shape) {
  if (t.shape != shape)
    throw Error(where(t, name) + ": expected shape " + shape_str(shape) + ", found " + shape_str(t.shape));
}

// Views are read through typed pointers by the backends: the element size must divide the data address
// (the mapping is page-aligned, so this is the file offset's alignment).
void check_aligned(const TensorView& t, const std::string& name) {
  size_t a = dtype_size(t.dtype);
  auto addr = reinterpret_cast<uintptr_t>(t.data);
  if (a > 1 && addr % a != 0)
    throw Error(where(t, name) + ": expected data aligned to " + std::to_string(a) + " bytes (" +
                dtype_name(t.dtype) + "), found an offset " + std::to_string(addr % a) + " past a boundary");
}

constexpr std::initializer_list<DType> kFloat = {DType::BF16, DType::F16, DType::F32};

float load_float(const uint8_t* p, DType d) {
  if (d == DType::F32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, p, 2);
  return d == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

}  // namespace

const TensorView& WeightReader::tensor(const std::string& name, const std::vector<int64_t>& shape,
                                       std::initializer_list<DType> allowed) {
  const TensorView& t = files_.get(name);
  check_dtype(t, name, allowed);
  check_shape(t, name, shape);
  used_.insert(name);
  return t;
}

std::vector<float> WeightReader::vec_f32(const std::string& name, const std::vector<int64_t>& shape, float add) {
  const TensorView& t = tensor(name, shape, {DType::F32, DType::BF16, DType::F16});
  const size_t n = size_t(t.numel()), es = dtype_size(t.dtype);
  std::vector<float> out(n);
  const auto* p = static_cast<const uint8_t*>(t.data);
  for (size_t i = 0; i < n; ++i) out[i] = load_float(p + i * es, t.dtype) + add;
  return out;
}

std::vector<QMatrix> WeightReader::views(const std::string& module, const std::string& weight_name, int64_t n,
                                         int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows) {
  // n == 0: a plain 2-D matrix; n > 0: [n, total_rows, ...] stacked.
  auto lead = [&](std::vector<int64_t> tail) {
    if (n > 0) tail.insert(tail.begin(), n);
    return tail;
  };
  const TensorView& w = files_.get(weight_name);
  const std::string s_name = module + ".scales", b_name = module + ".biases";
  const TensorView* s = files_.find(s_name);
  std::vector<QMatrix> out(size_t(n > 0 ? n : 1));
  if (!s && w.dtype != DType::U32) {  // dense
    check_dtype(w, weight_name, kFloat);
    check_shape(w, weight_name, lead({total_rows, cols}));
    check_aligned(w, weight_name);
    used_.insert(weight_name);
    const size_t es = dtype_size(w.dtype);
    for (size_t e = 0; e < out.size(); ++e) {
      QMatrix& m = out[e];
      m.kind = QMatrix::Kind::Dense;
      m.dtype = w.dtype;
      m.rows = rows;
      m.cols = cols;
      m.w = static_cast<const uint8_t*>(w.data) + ((int64_t(e) * total_rows + row_begin) * cols) * es;
    }
    return out;
  }
  // affine
  if (!s)
    throw Error(where(w, weight_name) + ": U32 (quantised) weight, expected '" + s_name + "' next to it, found none (searched " +
                files_.files_searched() + ")");
  check_dtype(w, weight_name, {DType::U32});
  if (!quant_.present())
    throw Error(where(w, weight_name) + ": quantised (U32 with scales), expected a 'quantization' entry in config.json, found none");
  const QuantSpec q = quant_.resolve(module);
  if (!q.quantized)
    throw Error(where(w, weight_name) + ": quantised (U32 with scales), but " + q.source + " says module '" + module +
                "' is not quantised");
  const int64_t g = q.group;
  if (cols % g != 0)
    throw Error(where(w, weight_name) + ": expected input size " + std::to_string(cols) + " divisible by group_size " +
                std::to_string(g) + " (" + q.source + ")");
  check_dtype(*s, s_name, kFloat);
  check_shape(*s, s_name, lead({total_rows, cols / g}));
  const TensorView& b = files_.get(b_name);
  check_dtype(b, b_name, {s->dtype});
  check_shape(b, b_name, s->shape);
  if (w.shape.empty() || w.shape.back() <= 0)
    throw Error(where(w, weight_name) + ": expected shape " + shape_str(lead({total_rows, cols * q.bits / 32})) +
                ", found " + shape_str(w.shape));
  const int64_t packed = w.shape.back();
  if ((packed * 32) % cols != 0 || packed * 32 / cols != q.bits)
    throw Error(where(w, weight_name) + ": " + q.source + " gives " + std::to_string(q.bits) + " bits (group " +
                std::to_string(g) + "), expected last dimension " + std::to_string(cols * q.bits / 32) + ", found " +
                std::to_string(packed) + " (weight " + shape_str(w.shape) + " with scales " + shape_str(s->shape) +
                " implies " + ((packed * 32) % cols ? std::string("a non-integer") : std::to_string(packed * 32 / cols)) +
                " bits)");
  check_shape(w, weight_name, lead({total_rows, packed}));
  check_aligned(w, weight_name);
  check_aligned(*s, s_name);
  check_aligned(b, b_name);
  used_.insert(weight_name);
  used_.insert(s_name);
  used_.insert(b_name);
  const size_t ss = dtype_size(s->dtype), ng = size_t(cols / g);
  for (size_t e = 0; e < out.size(); ++e) {
    QMatrix& m = out[e];
    const int64_t r0 = int64_t(e) * total_rows + row_begin;
    m.kind = QMatrix::Kind::Affine;
    m.sdtype = s->dtype;
    m.bits = q.bits;
    m.group = int(g);
    m.rows = rows;
    m.cols = cols;
    m.w = static_cast<const uint8_t*>(w.data) + size_t(r0 * packed) * 4;
    m.scales = static_cast<const uint8_t*>(s->data) + size_t(r0) * ng * ss;
    m.biases = static_cast<const uint8_t*>(b.data) + size_t(r0) * ng * ss;
  }
  return out;
}

QMatrix WeightReader::matrix(const std::string& module, int64_t rows, int64_t cols) {
  return views(module, module + ".weight", 0, rows, cols, 0, rows)[0];
}

ExpertStack WeightReader::stacked(const std::string& module, const std::string& weight_name, int64_t n,
                                  int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows) {
  ExpertStack st;
  st.e = views(module, weight_name, n, total_rows, cols, row_begin, rows);
  return st;
}

void WeightReader::warn_unused(const std::vector<std::string>& ignored) const {
  std::vector<std::string> extra;
  for (const std::string& name : files_.names()) {
    if (used_.count(name)) continue;
    bool skip = false;
    for (const std::string& p : ignored) skip = skip || name.compare(0, p.size(), p) == 0;
    if (!skip) extra.push_back(name);
  }
  if (extra.empty()) return;
  std::string list;
  for (size_t i = 0; i < extra.size() && i < 8; ++i) list += (i ? ", " : "") + extra[i];
  if (extra.size() > 8) list += ", ...";
  std::fprintf(stderr, "lily: warning: %s: %zu unexpected tensor(s) ignored: %s\n", files_.dir().c_str(), extra.size(),
               list.c_str());
}

}  // namespace lily
