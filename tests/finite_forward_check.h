// A shared smoke check of synthetic models: six prompt tokens through the reference CPU path give finite logits
// at every position and more than one argmax over them (not a constant prediction).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <set>
#include <vector>

#include "app/make_backend.h"
#include "engine/backend.h"

inline void expect_finite_varied_logits(const std::shared_ptr<lily::ModelWeights>& w) {
  auto be = lily::make_backend("cpu-ref", w);  // the reference kernels: the oracle
  auto st = be->new_state(64);
  std::vector<int32_t> ids = {1, 77, 300, 4000, 12, 9};
  std::vector<float> logits(ids.size() * size_t(w->cfg.vocab));
  be->forward(*st, ids.data(), int(ids.size()), int(ids.size()), logits.data(), lily::ForwardOptions{});
  std::set<int> argmaxes;
  for (size_t t = 0; t < ids.size(); ++t) {
    const float* l = logits.data() + t * size_t(w->cfg.vocab);
    int best = 0;
    for (int v = 0; v < w->cfg.vocab; ++v) {
      ASSERT_TRUE(std::isfinite(l[v]));
      if (l[v] > l[best]) best = v;
    }
    argmaxes.insert(best);
  }
  EXPECT_GT(argmaxes.size(), 1u);  // not a constant prediction
}
