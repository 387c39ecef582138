#include "engine/backend.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "engine/step_sampler.h"
#include "engine/vocab_trie.h"

namespace lily {

void SeqState::assign(const SeqState&) { throw Error("this backend's sequence state cannot be rewound"); }

int Backend::decode_sample(SeqState& st, StepSampler& sampler, int32_t first_id, int max_steps,
                           const std::function<bool(int32_t)>& on_token, float* last_logits, const TokenMaskFn& mask) {
  if (max_steps <= 0) return 0;
  const int V = config().vocab;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<float> masked;
  std::vector<uint32_t> words;
  if (mask) {
    masked.resize(static_cast<size_t>(V));
    words.resize(static_cast<size_t>(mask_words(V)));
  }
  forward(st, &first_id, 1, 1, logits.data(), ForwardOptions{});
  int consumed = 1;
  for (int j = 1;; ++j) {
    if (mask) {
      if (!mask(words.data())) break;
      apply_token_mask(logits.data(), words.data(), V, masked.data());
    }
    const int32_t id = sampler.sample(mask ? masked.data() : logits.data());
    const bool go = on_token(id);
    if (consumed < max_steps) {  // the lookahead step: consumes the token just emitted
      forward(st, &id, 1, 1, logits.data(), ForwardOptions{});
      ++consumed;
    }
    if (!go || j == max_steps) break;
  }
  if (last_logits) std::memcpy(last_logits, logits.data(), size_t(V) * sizeof(float));
  return consumed;
}

void Backend::fill_context_for_timing(SeqState&, int) {
  throw Error(name() + ": unfilled decode contexts (timing only) are not supported");
}

void Backend::mtp_forward(SeqState&, const int32_t*, const float*, int, int, int, float*, float*) {
  throw Error(mtp_unavailable_reason());
}
int Backend::mtp_rows(const SeqState&) const { throw Error(mtp_unavailable_reason()); }
void Backend::mtp_truncate(SeqState&, int) { throw Error(mtp_unavailable_reason()); }

namespace {
struct CloneUndo final : VerifyUndo {
  std::unique_ptr<SeqState> before;
  std::vector<int32_t> ids;
};
}  // namespace

std::unique_ptr<VerifyUndo> Backend::verify(SeqState& st, const int32_t* ids, int n, float* logits, float* hidden) {
  if (n < 1) throw Error("verify: expected at least one token, got " + std::to_string(n));
  auto u = std::make_unique<CloneUndo>();
  u->before = st.clone();
  u->ids.assign(ids, ids + n);
  const int H = config().hidden;
  ForwardOptions fo;
  if (hidden)
    fo.on_hidden = [&](const float* h, int row0, int rows) {
      std::memcpy(hidden + size_t(row0 - u->before->pos) * size_t(H), h, size_t(rows) * size_t(H) * sizeof(float));
    };
  forward(st, ids, n, n, logits, fo);
  return u;
}

namespace {
int32_t logits_argmax(const float* l, int V) {
  auto at = [&](int i) { return std::isnan(l[i]) ? -INFINITY : l[i]; };
  int32_t best = 0;
  for (int i = 1; i < V; ++i)
    if (at(i) > at(best)) best = i;
  return best;
}
}  // namespace

std::unique_ptr<VerifyUndo> Backend::verify_argmax(SeqState& st, const int32_t* ids, int n, int32_t* ids_out,
                                                   float* hidden) {
  if (n < 1) throw Error("verify: expected at least one token, got " + std::to_string(n));
  const int V = config().vocab;
  std::vector<float> logits(size_t(n) * size_t(V));
  auto u = verify(st, ids, n, logits.data(), hidden);
  for (int i = 0; i < n; ++i) ids_out[i] = logits_argmax(logits.data() + size_t(i) * size_t(V), V);
  return u;
}

int32_t Backend::mtp_argmax(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0, float* hidden_out) {
  std::vector<float> logits(static_cast<size_t>(config().vocab));
  mtp_forward(st, ids, hidden, n, pos0, 1, logits.data(), hidden_out);
  return logits_argmax(logits.data(), config().vocab);
}

void Backend::accept(SeqState& st, VerifyUndo& undo, int m) {
  auto* u = dynamic_cast<CloneUndo*>(&undo);
  if (!u) throw Error("accept: the undo record was made by another backend");
  const int n = static_cast<int>(u->ids.size());
  if (m < 1 || m > n) throw Error("accept: " + std::to_string(m) + " tokens kept of " + std::to_string(n));
  if (m == n) return;
  st.assign(*u->before);
  forward(st, u->ids.data(), m, 0, nullptr, ForwardOptions{});
}

}  // namespace lily
