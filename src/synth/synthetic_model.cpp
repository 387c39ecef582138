#include "synth/synthetic_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/parallel.h"
#include "synth/counter_rng.h"
#include "synth/module_plan.h"
#include "synth/presets.h"

namespace lily {

namespace {

// One slice of rows of one module's stack (rows counted across the stack: count * rows).
struct WorkItem {
  size_t module;
  int64_t row_begin, row_end;
};

struct ModuleBuffers {
  uint64_t* w = nullptr;   // packed words, viewed as u64 pairs
  uint16_t* scales = nullptr;
  uint16_t* biases = nullptr;
};

float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }

void fill_rows(const ModuleSpec& m, const ModuleBuffers& b, uint64_t key, int64_t r0, int64_t r1) {
  const int64_t row_u64 = m.cols * m.bits / 64;
  const int64_t groups = m.cols / m.group;
  const double levels = double((1u << m.bits) - 1);
  const double q_std = std::sqrt((levels + 1) * (levels + 1) - 1) / std::sqrt(12.0);
  const double base = double(m.gain) / std::sqrt(double(m.cols)) / q_std;
  const uint64_t key_w = key, key_s = splitmix64(key ^ 0x5CA1E5ull);
  for (int64_t r = r0; r < r1; ++r) {
    uint64_t* wr = b.w + r * row_u64;
    for (int64_t j = 0; j < row_u64; ++j) wr[j] = rng_word(key_w, uint64_t(r * row_u64 + j));
    for (int64_t g = 0; g < groups; ++g) {
      uint64_t word = rng_word(key_s, uint64_t(r * groups + g));
      double factor = 0.75 + 0.5 * double(word >> 11) * 0x1.0p-53;
      double sign = (word & 1) ? -1.0 : 1.0;
      uint16_t s = f32_to_bf16(float(sign * base * factor));
      b.scales[r * groups + g] = s;
      b.biases[r * groups + g] = f32_to_bf16(float(-double(bf16_to_f32(s)) * levels / 2));
    }
  }
}

void fill_vector(const VectorSpec& v, uint64_t key, int kernel, std::vector<float>& out) {
  out.resize(size_t(v.numel()));
  for (size_t i = 0; i < out.size(); ++i) {
    double u = rng_unit(key, i);
    switch (v.slot) {
      case VecSlot::InNorm:
      case VecSlot::PostNorm:
      case VecSlot::FinalNorm:
      case VecSlot::QNorm:
      case VecSlot::KNorm:
      case VecSlot::LinNorm:
        out[i] = bf16_round(float(0.95 + 0.1 * u));
        break;
      case VecSlot::Conv:
        out[i] = bf16_round(float((2 * u - 1) / std::sqrt(double(kernel))));
        break;
      case VecSlot::DtBias: {
        double dt = std::exp(std::log(1e-3) + u * (std::log(0.1) - std::log(1e-3)));
        out[i] = bf16_round(float(std::log(std::expm1(dt))));  // softplus(dt_bias) = dt
        break;
      }
      case VecSlot::ALog: {
        float a_log = float(std::log(1.0 + 15.0 * u));
        out[i] = -std::exp(a_log);  // ModelWeights holds a_neg = -exp(A_log)
        break;
      }
    }
  }
}

void set_matrix(QMatrix& q, const ModuleSpec& m, const void* w, const void* s, const void* b) {
  q.kind = QMatrix::Kind::Affine;
  q.sdtype = DType::BF16;
  q.dtype = DType::U32;
  q.bits = m.bits;
  q.group = m.group;
  q.rows = m.rows;
  q.cols = m.cols;
  q.w = w;
  q.scales = s;
  q.biases = b;
}

}  // namespace

std::shared_ptr<ModelWeights> make_synthetic(const std::string& preset, uint64_t seed,
                                             const SynthProgressFn& progress) {
  return make_synthetic_from_config(make_synthetic_config(preset), seed, progress);
}

std::shared_ptr<ModelWeights> make_synthetic_from_config(const ModelConfig& cfg, uint64_t seed,
                                                         const SynthProgressFn& progress) {
  auto w = empty_model(cfg, "mlx-affine");

  const auto modules = plan_modules(cfg);
  std::vector<ModuleBuffers> bufs(modules.size());
  std::vector<WorkItem> items;
  uint64_t total = 0;
  for (size_t mi = 0; mi < modules.size(); ++mi) {
    const auto& m = modules[mi];
    size_t n_u64 = m.w_bytes() / 8, n_sb = m.sb_bytes() / 2;
    auto wbuf = std::shared_ptr<uint64_t[]>(new uint64_t[n_u64]);
    auto sbuf = std::shared_ptr<uint16_t[]>(new uint16_t[n_sb]);
    auto bbuf = std::shared_ptr<uint16_t[]>(new uint16_t[n_sb]);
    bufs[mi] = {wbuf.get(), sbuf.get(), bbuf.get()};
    w->keep_alive.push_back(wbuf);
    w->keep_alive.push_back(sbuf);
    w->keep_alive.push_back(bbuf);
    const size_t row_b = size_t(m.cols) * size_t(m.bits) / 8, sb_row = size_t(m.cols / m.group);
    for (int e = 0; e < m.count; ++e) {
      const auto* wb = reinterpret_cast<const uint8_t*>(wbuf.get()) + size_t(e) * size_t(m.rows) * row_b;
      set_matrix(slot_matrix(*w, m, e), m, wb, sbuf.get() + size_t(e) * size_t(m.rows) * sb_row,
                 bbuf.get() + size_t(e) * size_t(m.rows) * sb_row);
    }
    // ~2 MiB of packed weights per work item
    const int64_t all_rows = int64_t(m.count) * m.rows;
    const int64_t rows_per = std::max<int64_t>(1, int64_t((2u << 20) / row_b));
    for (int64_t r = 0; r < all_rows; r += rows_per) items.push_back({mi, r, std::min(all_rows, r + rows_per)});
    total += m.w_bytes() + 2 * m.sb_bytes();
  }

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::exception_ptr err;
  std::mutex err_mu;
  auto worker = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < items.size();) {
        const auto& it = items[i];
        const auto& m = modules[it.module];
        fill_rows(m, bufs[it.module], rng_key(seed, m.name), it.row_begin, it.row_end);
        uint64_t bytes = uint64_t(it.row_end - it.row_begin) *
                         (uint64_t(m.cols) * uint64_t(m.bits) / 8 + uint64_t(m.cols / m.group) * 4);
        uint64_t d = done.fetch_add(bytes) + bytes;
        if (progress) progress(std::min(d, total), total);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (!err) err = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  int n_threads = std::max(1, std::min<int>(hardware_threads(), int(items.size())));
  for (int t = 1; t < n_threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);

  fill_synthetic_vectors(*w, seed);
  if (progress) progress(total, total);
  return w;
}

void fill_synthetic_vectors(ModelWeights& w, uint64_t seed) {
  for (const auto& v : plan_vectors(w.cfg)) fill_vector(v, rng_key(seed, v.name), w.cfg.conv_kernel, slot_vector(w, v));
}

uint64_t model_weight_bytes(const ModelWeights& w) {
  uint64_t n = 0;
  for (const auto& m : plan_modules(w.cfg))
    for (int e = 0; e < m.count; ++e) n += qmatrix_bytes(slot_matrix(w, m, e));
  for (const auto& v : plan_vectors(w.cfg)) n += slot_vector(w, v).size() * sizeof(float);
  return n;
}

}  // namespace lily
