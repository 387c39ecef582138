#include "synth/synthetic_mtp.h"

#include <cmath>
#include <memory>

#include "core/dtype.h"
#include "synth/counter_rng.h"
#include "synth/synthetic_model.h"

namespace lily {

void add_synthetic_mtp(ModelWeights& w, uint64_t seed) {
  ModelConfig c1 = w.cfg;
  c1.n_layers = 1;
  c1.is_full = {true};
  c1.vocab = 64;  // the one-layer model's embed / lm_head are not used (the block shares the main model's)
  const uint64_t sub_seed = splitmix64(seed ^ 0x4D54502D424C4B31ull);
  auto sub = make_synthetic_from_config(c1, sub_seed);
  auto m = std::make_shared<MtpWeights>();
  m->layer = std::move(sub->layers[0]);
  m->pre_norm_e = sub->final_norm;
  m->pre_norm_h.resize(sub->final_norm.size());
  m->norm.resize(sub->final_norm.size());
  const uint64_t kh = rng_key(sub_seed, "mtp.pre_fc_norm_hidden"), kn = rng_key(sub_seed, "mtp.norm");
  for (size_t i = 0; i < m->norm.size(); ++i) {
    m->pre_norm_h[i] = float(1.0 + 0.1 * (rng_unit(kh, i) - 0.5));
    m->norm[i] = float(1.0 + 0.1 * (rng_unit(kn, i) - 0.5));
  }
  const int64_t H = w.cfg.hidden;
  auto fc = std::shared_ptr<uint16_t[]>(new uint16_t[size_t(H) * size_t(2 * H)]);
  const uint64_t kf = rng_key(sub_seed, "mtp.fc");
  const double amp = std::sqrt(3.0) / std::sqrt(double(2 * H));  // uniform in +-amp: std 1/sqrt(2H)
  for (size_t i = 0; i < size_t(H) * size_t(2 * H); ++i) fc[i] = f32_to_bf16(float(amp * (2.0 * rng_unit(kf, i) - 1.0)));
  m->fc.kind = QMatrix::Kind::Dense;
  m->fc.dtype = DType::BF16;
  m->fc.rows = H;
  m->fc.cols = 2 * H;
  m->fc.w = fc.get();
  m->source = "synthetic";
  for (auto& k : sub->keep_alive) w.keep_alive.push_back(k);
  w.keep_alive.push_back(fc);
  w.mtp_tensors = {"mtp.* (synthetic)"};
  w.mtp = std::move(m);
}

}  // namespace lily
