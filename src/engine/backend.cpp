#include "engine/backend.h"

#include <cstring>

#include "core/error.h"
#include "engine/step_sampler.h"
#include "engine/vocab_trie.h"

namespace lily {

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

}  // namespace lily
