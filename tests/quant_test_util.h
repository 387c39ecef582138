// Helpers for the quantised-format tests: every matrix of a model, a copy of a model with every matrix decoded
// to dense F32 (the exact dequantised reference), and prompt logits on a backend.
#pragma once
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "app/make_backend.h"
#include "engine/backend.h"
#include "model/weights.h"

namespace lily_test {

inline void for_each_matrix(lily::ModelWeights& w, const std::function<void(lily::QMatrix&)>& f) {
  f(w.embed);
  f(w.lm_head);
  for (auto& l : w.layers) {
    if (l.is_full) {
      for (lily::QMatrix* m : {&l.attn.q, &l.attn.k, &l.attn.v, &l.attn.o}) f(*m);
    } else {
      for (lily::QMatrix* m : {&l.lin.in_qkv, &l.lin.in_z, &l.lin.in_b, &l.lin.in_a, &l.lin.out}) f(*m);
    }
    auto& m = l.moe;
    for (lily::QMatrix* q : {&m.router, &m.sh_gate, &m.sh_up, &m.sh_down, &m.sh_gate_w}) f(*q);
    for (auto* st : {&m.gate, &m.up, &m.down})
      for (auto& q : st->e) f(q);
  }
}

// A copy of `w` whose matrices are dense F32 holding dequant_row of the originals (exactly the values the
// reference kernels use).
inline std::shared_ptr<lily::ModelWeights> dequantised_copy(const std::shared_ptr<lily::ModelWeights>& w) {
  auto d = std::make_shared<lily::ModelWeights>(*w);
  for_each_matrix(*d, [&](lily::QMatrix& m) {
    auto buf = std::make_shared<std::vector<float>>(size_t(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) lily::dequant_row(m, r, buf->data() + size_t(r * m.cols));
    lily::QMatrix n;
    n.kind = lily::QMatrix::Kind::Dense;
    n.dtype = lily::DType::F32;
    n.rows = m.rows;
    n.cols = m.cols;
    n.w = buf->data();
    d->keep_alive.push_back(buf);
    m = n;
  });
  return d;
}

inline std::vector<float> logits_of(const std::shared_ptr<lily::ModelWeights>& w, const std::string& kind,
                                    const std::vector<int32_t>& ids = {1, 17, 4000, 256, 3, 99, 1024, 7, 4095, 12}) {
  auto be = lily::make_backend(kind, w);
  const int n = int(ids.size());
  std::vector<float> out(size_t(n) * size_t(w->cfg.vocab));
  auto st = be->new_state(64);
  be->forward(*st, ids.data(), n, n, out.data(), {});
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

inline bool has_note(const lily::ModelWeights& w, const std::string& sub) {
  for (const std::string& n : w.load_notes)
    if (n.find(sub) != std::string::npos) return true;
  return false;
}

}  // namespace lily_test
