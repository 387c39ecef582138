#include "model/weight_reader.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "model/repack.h"

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

constexpr std::initializer_list<DType> kFloat = {DType::BF16, DType::F16, DType::F32};

int32_t decode_i32(const void* p, size_t i) {
  int32_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + 4 * i, 4);
  return v;
}

int64_t decode_i64(const void* p, size_t i) {
  int64_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + 8 * i, 8);
  return v;
}

}  // namespace

const TensorView& WeightReader::tensor(const std::string& name, const std::vector<int64_t>& shape,
                                       std::initializer_list<DType> allowed) {
  const TensorView& t = files_.get(name);
  check_dtype(t, name, allowed);
  check_shape(t, name, shape);
  use(name);
  return t;
}

std::vector<float> WeightReader::vec_f32(const std::string& name, const std::vector<int64_t>& shape, float add) {
  const TensorView& t = tensor(name, shape, {DType::F32, DType::BF16, DType::F16});
  const size_t n = size_t(t.numel());
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = decode_scalar(t.data, t.dtype, i) + add;
  return out;
}

uint8_t* WeightReader::alloc(size_t bytes) {
  auto buf = std::make_shared<std::vector<uint8_t>>(std::max<size_t>(bytes, 1));
  uint8_t* p = buf->data();
  owned_.push_back(std::move(buf));
  return p;
}

const uint8_t* WeightReader::aligned(const TensorView& t) {
  const size_t a = dtype_size(t.dtype);
  const auto* p = static_cast<const uint8_t*>(t.data);
  if (a <= 1 || reinterpret_cast<uintptr_t>(p) % a == 0) return p;
  auto it = copies_.find(t.data);
  if (it != copies_.end()) return it->second;
  uint8_t* c = alloc(t.nbytes);  // operator new: aligned for every element type
  std::memcpy(c, p, t.nbytes);
  copies_.emplace(t.data, c);
  ++copied_tensors_;
  copied_bytes_ += t.nbytes;
  return c;
}

std::vector<QMatrix> WeightReader::views(const std::string& module, const std::string& weight_name, int64_t n,
                                         int64_t total_rows, int64_t cols, int64_t row_begin, int64_t rows) {
  // n == 0: a plain 2-D matrix; n > 0: [n, total_rows, ...] stacked.
  auto lead = [&](std::vector<int64_t> tail) {
    if (n > 0) tail.insert(tail.begin(), n);
    return tail;
  };
  if (n == 0 && (has(module + ".qweight") || has(module + ".weight_packed"))) return {int4_view(module, rows, cols)};
  const TensorView& w = files_.get(weight_name);
  if (w.dtype == DType::F8_E4M3) {
    if (n != 0 || row_begin != 0 || rows != total_rows)
      throw Error(where(w, weight_name) + ": FP8 weights stacked in one tensor are not supported; expected one "
                  "tensor per expert (as the official FP8 release stores them)");
    return {fp8_view(module, w, weight_name, rows, cols)};
  }
  if (files_.find(module + ".scales") || w.dtype == DType::U32)
    return affine_views(module, w, weight_name, n, total_rows, cols, row_begin, rows);
  check_dtype(w, weight_name, kFloat);
  check_shape(w, weight_name, lead({total_rows, cols}));
  use(weight_name);
  const uint8_t* data = aligned(w);
  const size_t es = dtype_size(w.dtype);
  std::vector<QMatrix> out(size_t(n > 0 ? n : 1));
  for (size_t e = 0; e < out.size(); ++e) {
    QMatrix& m = out[e];
    m.kind = QMatrix::Kind::Dense;
    m.dtype = w.dtype;
    m.rows = rows;
    m.cols = cols;
    m.w = data + size_t((int64_t(e) * total_rows + row_begin) * cols) * es;
  }
  return out;
}

std::vector<QMatrix> WeightReader::affine_views(const std::string& module, const TensorView& w,
                                                const std::string& weight_name, int64_t n, int64_t total_rows,
                                                int64_t cols, int64_t row_begin, int64_t rows) {
  auto lead = [&](std::vector<int64_t> tail) {
    if (n > 0) tail.insert(tail.begin(), n);
    return tail;
  };
  const std::string s_name = module + ".scales", b_name = module + ".biases";
  const TensorView* s = files_.find(s_name);
  if (!s)
    throw Error(where(w, weight_name) + ": U32 (quantised) weight, expected '" + s_name + "' next to it, found none (searched " +
                files_.files_searched() + ")");
  check_dtype(w, weight_name, {DType::U32});
  if (!quant_.present())
    throw Error(where(w, weight_name) + ": quantised (U32 with scales), expected a 'quantization' entry in config.json, found " +
                (quant_.method() == QuantMethod::None ? std::string("none")
                                                      : std::string("quant_method ") + quant_method_name(quant_.method())));
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
  use(weight_name);
  use(s_name);
  use(b_name);
  const uint8_t* wd = aligned(w);
  const uint8_t* sd = aligned(*s);
  const uint8_t* bd = aligned(b);
  const bool repack = q.bits != 4 && q.bits != 8;
  const size_t ss = dtype_size(s->dtype), ng = size_t(cols / g);
  std::vector<QMatrix> out(size_t(n > 0 ? n : 1));
  for (size_t e = 0; e < out.size(); ++e) {
    QMatrix& m = out[e];
    const int64_t r0 = int64_t(e) * total_rows + row_begin;
    m.kind = QMatrix::Kind::Affine;
    m.sdtype = s->dtype;
    m.bits = q.bits;
    m.group = int(g);
    m.rows = rows;
    m.cols = cols;
    m.w = wd + size_t(r0 * packed) * 4;
    m.scales = sd + size_t(r0) * ng * ss;
    m.biases = bd + size_t(r0) * ng * ss;
    if (repack) {  // other widths: one byte per code, same scales and biases (exact)
      uint8_t* codes = alloc(size_t(rows * cols));
      repack_bits_to_u8(static_cast<const uint8_t*>(m.w), q.bits, rows, cols, codes);
      m.w = codes;
      m.bits = 8;
      auto& r = repacked_["MLX affine " + std::to_string(q.bits) + "-bit codes to 8-bit codes (same scales and biases, exact)"];
      r.first += 1;
      r.second += size_t(rows * cols);
    }
  }
  return out;
}

QMatrix WeightReader::fp8_view(const std::string& module, const TensorView& w, const std::string& weight_name,
                               int64_t rows, int64_t cols) {
  if (quant_.method() != QuantMethod::Fp8)
    throw Error(where(w, weight_name) + ": F8_E4M3 weight, expected quantization_config.quant_method \"fp8\" in "
                "config.json, found " + quant_method_name(quant_.method()));
  check_shape(w, weight_name, {rows, cols});
  const int64_t B = quant_.hf().fp8_block;
  const std::string s_name = module + ".weight_scale_inv";
  const TensorView* s = files_.find(s_name);
  if (!s)
    throw Error(where(w, weight_name) + ": F8_E4M3 weight, expected '" + s_name + "' next to it, found none (searched " +
                files_.files_searched() + ")");
  check_dtype(*s, s_name, {DType::F32, DType::BF16});
  check_shape(*s, s_name, {(rows + B - 1) / B, (cols + B - 1) / B});
  use(weight_name);
  use(s_name);
  QMatrix m;
  m.kind = QMatrix::Kind::Fp8Block;
  m.dtype = DType::F8_E4M3;
  m.sdtype = s->dtype;
  m.bits = 8;
  m.group = int(B);
  m.rows = rows;
  m.cols = cols;
  m.w = aligned(w);
  m.scales = aligned(*s);
  ++fp8_matrices_;
  return m;
}

QMatrix WeightReader::int4_view(const std::string& module, int64_t rows, int64_t cols) {
  const QuantMethod qm = quant_.method();
  const bool ct = has(module + ".weight_packed");
  const std::string first = module + (ct ? ".weight_packed" : ".qweight");
  const TensorView& qw = files_.get(first);
  if (ct ? qm != QuantMethod::CompressedTensors : (qm != QuantMethod::Gptq && qm != QuantMethod::Awq))
    throw Error(where(qw, first) + ": " + (ct ? "compressed-tensors" : "GPTQ/AWQ") +
                " weight, but config.json quantization_config gives quant_method " + quant_method_name(qm));
  const HfQuant& h = quant_.hf();
  const int64_t group = h.group == -1 ? cols : h.group;
  if (cols % 64 != 0 || rows % 8 != 0 || cols % group != 0 || group % 64 != 0)
    throw Error(where(qw, first) + ": int4 matrix [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] with group " + std::to_string(group) + ": expected rows a multiple of 8, columns of 64 and of the "
                "group, and the group a multiple of 64");
  const int64_t G = cols / group;
  Int4Source src;
  src.rows = rows;
  src.cols = cols;
  src.group = group;
  std::string what;
  if (qm == QuantMethod::CompressedTensors) {
    what = "compressed-tensors pack-quantized int4";
    src.format = Int4Source::Format::PackQuantized;
    check_dtype(qw, first, {DType::I32});
    check_shape(qw, first, {rows, cols / 8});
    const std::string sn = module + ".weight_scale";
    const TensorView& sc = files_.get(sn);
    check_dtype(sc, sn, kFloat);
    check_shape(sc, sn, {rows, G});
    src.scales = aligned(sc);
    src.sdtype = sc.dtype;
    use(sn);
    const std::string zn = module + ".weight_zero_point";
    if (const TensorView* z = files_.find(zn)) {
      check_dtype(*z, zn, {DType::I32, DType::I8});
      check_shape(*z, zn, z->dtype == DType::I32 ? std::vector<int64_t>{rows / 8, G} : std::vector<int64_t>{rows, G});
      src.qzeros = aligned(*z);
      src.zdtype = z->dtype;
      use(zn);
    } else if (!h.sym) {
      throw Error(where(qw, first) + ": asymmetric (symmetric: false in " + quant_.source() + "), expected '" + zn +
                  "' next to it, found none");
    }
    const std::string shn = module + ".weight_shape";
    if (const TensorView* sh = files_.find(shn)) {
      check_dtype(*sh, shn, {DType::I32, DType::I64});
      check_shape(*sh, shn, {2});
      const int64_t d0 = sh->dtype == DType::I64 ? int64_t(decode_i64(sh->data, 0)) : int64_t(decode_i32(sh->data, 0));
      const int64_t d1 = sh->dtype == DType::I64 ? int64_t(decode_i64(sh->data, 1)) : int64_t(decode_i32(sh->data, 1));
      if (d0 != rows || d1 != cols)
        throw Error(where(*sh, shn) + ": expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "], found [" +
                    std::to_string(d0) + ", " + std::to_string(d1) + "]");
      use(shn);
    }
  } else {
    const bool awq = qm == QuantMethod::Awq;
    what = awq ? "AWQ int4" : "GPTQ int4";
    src.format = awq ? Int4Source::Format::Awq : Int4Source::Format::Gptq;
    src.zeros_plus_one = !h.gptq_v2;
    check_dtype(qw, first, {DType::I32, DType::U32});
    check_shape(qw, first, awq ? std::vector<int64_t>{cols, rows / 8} : std::vector<int64_t>{cols / 8, rows});
    const std::string zn = module + ".qzeros", sn = module + ".scales";
    const TensorView& z = files_.get(zn);
    check_dtype(z, zn, {DType::I32, DType::U32});
    check_shape(z, zn, {G, rows / 8});
    const TensorView& sc = files_.get(sn);
    check_dtype(sc, sn, kFloat);
    check_shape(sc, sn, {G, rows});
    src.qzeros = aligned(z);
    src.scales = aligned(sc);
    src.sdtype = sc.dtype;
    use(zn);
    use(sn);
    const std::string gn = module + ".g_idx";
    if (const TensorView* gi = files_.find(gn)) {
      check_dtype(*gi, gn, {DType::I32, DType::I64});
      check_shape(*gi, gn, {cols});
      for (int64_t i = 0; i < cols; ++i) {
        const int64_t v = gi->dtype == DType::I64 ? int64_t(decode_i64(gi->data, size_t(i))) : decode_i32(gi->data, size_t(i));
        if (v != i / group)
          throw Error(where(*gi, gn) + ": act-order GPTQ (desc_act: input channel " + std::to_string(i) + " in group " +
                      std::to_string(v) + ", expected " + std::to_string(i / group) +
                      ") is not supported; use a GPTQ conversion made with desc_act false");
      }
      use(gn);
    } else if (h.desc_act) {
      throw Error(where(qw, first) + ": desc_act is true in " + quant_.source() + " but '" + gn +
                  "' is missing; act-order GPTQ is not supported");
    }
  }
  src.qweight = aligned(qw);
  use(first);
  const int64_t G64 = cols / 64;
  uint8_t* codes = alloc(size_t(rows * cols / 2));
  auto* sc = reinterpret_cast<float*>(alloc(size_t(rows * G64) * 4));
  auto* bi = reinterpret_cast<float*>(alloc(size_t(rows * G64) * 4));
  repack_int4(src, codes, sc, bi);
  auto& r = repacked_[what + " to MLX affine 4-bit group 64 (f32 scale, bias = -zero*scale: exact)"];
  r.first += 1;
  r.second += size_t(rows * cols / 2 + rows * G64 * 8);
  QMatrix m;
  m.kind = QMatrix::Kind::Affine;
  m.sdtype = DType::F32;
  m.bits = 4;
  m.group = 64;
  m.rows = rows;
  m.cols = cols;
  m.w = codes;
  m.scales = sc;
  m.biases = bi;
  return m;
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

std::vector<std::string> WeightReader::notes() const {
  auto mib = [](size_t b) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f MiB", double(b) / (1024.0 * 1024.0));
    return std::string(s);
  };
  std::vector<std::string> out;
  const std::vector<std::string> re = files_.realigned_files();
  if (!re.empty()) {
    std::string list;
    for (size_t i = 0; i < re.size(); ++i) list += (i ? ", " : "") + re[i];
    out.push_back(std::to_string(re.size()) + " shard(s) with the data section at an unaligned offset (a compact "
                  "header, as MLX writes them) read into aligned memory instead of mapped: " + list);
  }
  if (copied_tensors_)
    out.push_back("copied " + std::to_string(copied_tensors_) + " tensor(s) (" + mib(copied_bytes_) +
                  ") stored at offsets not a multiple of their element size into aligned memory");
  for (const auto& [what, nb] : repacked_)
    out.push_back("repacked " + std::to_string(nb.first) + " matrices of " + what + ": " + mib(nb.second));
  if (fp8_matrices_)
    out.push_back(std::to_string(fp8_matrices_) + " FP8 e4m3 matrices kept 8-bit with " +
                  std::to_string(quant_.hf().fp8_block) + "x" + std::to_string(quant_.hf().fp8_block) +
                  " block scales (dequantised inside the matrix kernels)");
  return out;
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
