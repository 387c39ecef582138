#include "synth/synthetic_fp8.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/dtype.h"
#include "core/parallel.h"
#include "synth/counter_rng.h"
#include "synth/module_plan.h"
#include "synth/presets.h"

namespace lily {

namespace {

constexpr int kBlock = 128;  // the release's weight_block_size

// The modules the FP8 release keeps in BF16.
bool kept_bf16(MatSlot s) {
  return s == MatSlot::Embed || s == MatSlot::LmHead || s == MatSlot::Router || s == MatSlot::ShGateW ||
         s == MatSlot::LinA || s == MatSlot::LinB;
}

// rms of the code values the mapping produces (every byte equally likely)
double code_rms() {
  double ss = 0;
  for (int b = 0; b < 256; ++b) {
    const double v = f8e4m3_to_f32(synth_fp8_code(uint8_t(b)));
    ss += v * v;
  }
  return std::sqrt(ss / 256);
}

struct Buffers {  // one module's stack
  uint8_t* codes = nullptr;
  float* scales = nullptr;
  uint16_t* bf16 = nullptr;
};

// Rows [r0, r1) of the module's stack (rows counted across the stack).
void fill(const ModuleSpec& m, const Buffers& b, uint64_t key, int64_t r0, int64_t r1, double rms) {
  const double std_w = double(m.gain) / std::sqrt(double(m.cols));
  if (b.bf16) {
    const double half = std_w * std::sqrt(3.0);  // uniform in [-half, half] has std std_w
    for (int64_t i = r0 * m.cols; i < r1 * m.cols; ++i)
      b.bf16[i] = f32_to_bf16(float((2 * rng_unit(key, uint64_t(i)) - 1) * half));
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    uint8_t* row = b.codes + r * m.cols;
    for (int64_t j = 0; j < m.cols; j += 8) {
      const uint64_t word = rng_word(key, uint64_t((r * m.cols + j) / 8));
      for (int k = 0; k < 8 && j + k < m.cols; ++k) row[j + k] = synth_fp8_code(uint8_t(word >> (8 * k)));
    }
  }
  // the scales of the 128-row blocks whose first row is in [r0, r1)
  const int64_t per = m.rows, bc = (m.cols + kBlock - 1) / kBlock, br = (m.rows + kBlock - 1) / kBlock;
  const uint64_t key_s = splitmix64(key ^ 0x5CA1E5ull);
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t e = r / per, lr = r % per;
    if (lr % kBlock) continue;
    const int64_t blk = e * br + lr / kBlock;
    for (int64_t c = 0; c < bc; ++c) {
      const double factor = 0.75 + 0.5 * rng_unit(key_s, uint64_t(blk * bc + c));
      b.scales[blk * bc + c] = float(std_w / rms * factor);
    }
  }
}

}  // namespace

std::shared_ptr<ModelWeights> make_synthetic_fp8(const std::string& preset, uint64_t seed,
                                                 const SynthProgressFn& progress) {
  const ModelConfig cfg = make_synthetic_config(preset);
  auto w = empty_model(cfg, "fp8");
  const double rms = code_rms();
  const auto modules = plan_modules(cfg);
  std::vector<Buffers> bufs(modules.size());
  struct Item {
    size_t module;
    int64_t r0, r1;
  };
  std::vector<Item> items;
  uint64_t total = 0;
  for (size_t mi = 0; mi < modules.size(); ++mi) {
    const ModuleSpec& m = modules[mi];
    const bool dense = kept_bf16(m.slot);
    const size_t elems = size_t(m.count) * size_t(m.rows) * size_t(m.cols);
    const int64_t br = (m.rows + kBlock - 1) / kBlock, bc = (m.cols + kBlock - 1) / kBlock;
    const size_t nsc = size_t(m.count) * size_t(br * bc);
    if (dense) {
      auto buf = std::shared_ptr<uint16_t[]>(new uint16_t[elems]);
      bufs[mi].bf16 = buf.get();
      w->keep_alive.push_back(buf);
    } else {
      auto cb = std::shared_ptr<uint8_t[]>(new uint8_t[elems]);
      auto sb = std::shared_ptr<float[]>(new float[nsc]);
      bufs[mi].codes = cb.get();
      bufs[mi].scales = sb.get();
      w->keep_alive.push_back(cb);
      w->keep_alive.push_back(sb);
    }
    for (int e = 0; e < m.count; ++e) {
      QMatrix& q = slot_matrix(*w, m, e);
      q = QMatrix{};
      q.rows = m.rows;
      q.cols = m.cols;
      const size_t off = size_t(e) * size_t(m.rows) * size_t(m.cols);
      if (dense) {
        q.kind = QMatrix::Kind::Dense;
        q.dtype = DType::BF16;
        q.w = bufs[mi].bf16 + off;
      } else {
        q.kind = QMatrix::Kind::Fp8Block;
        q.dtype = DType::F8_E4M3;
        q.sdtype = DType::F32;
        q.group = kBlock;
        q.w = bufs[mi].codes + off;
        q.scales = bufs[mi].scales + size_t(e) * size_t(br * bc);
      }
    }
    // ~2 MiB per work item (a block's scales are written by the item holding its first row)
    const int64_t all_rows = int64_t(m.count) * m.rows;
    const int64_t rows_per = std::max<int64_t>(1, (int64_t(2) << 20) / (m.cols * (dense ? 2 : 1)));
    for (int64_t r = 0; r < all_rows; r += rows_per) items.push_back({mi, r, std::min(all_rows, r + rows_per)});
    total += uint64_t(elems) * (dense ? 2 : 1);
  }
  std::atomic<uint64_t> done{0};
  parallel_for(int64_t(items.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Item& it = items[size_t(i)];
      const ModuleSpec& m = modules[it.module];
      fill(m, bufs[it.module], rng_key(seed, m.name), it.r0, it.r1, rms);
      const uint64_t bytes = uint64_t(it.r1 - it.r0) * uint64_t(m.cols) * (bufs[it.module].bf16 ? 2 : 1);
      const uint64_t d = done.fetch_add(bytes) + bytes;
      if (progress) progress(std::min(d, total), total);
    }
  });
  fill_synthetic_vectors(*w, seed);
  if (progress) progress(total, total);
  return w;
}

}  // namespace lily
