// Running a model teacher-forced over token ids: all positions' logits, a reference logits file, and
// sliding-window perplexity.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace lily {

// Logits [n, vocab] of every position of `ids`, fed from position 0 in chunks of `chunk` tokens (0: the
// backend's default chunk, as a prompt is run).
std::vector<float> teacher_forced_logits(Backend& be, const std::vector<int32_t>& ids, int chunk);

// A reference file in the fixtures' format: prompt_ids i32 [L], prompt_logits f32 [L, V].
struct ReferenceLogits {
  std::vector<int32_t> ids;
  std::vector<float> logits;  // [L, V]
  int vocab = 0;
  // optional (the fixtures' long_ids / long_logits_last8): a longer prompt and the logits of its last rows
  std::vector<int32_t> long_ids;
  std::vector<float> long_logits;  // [long_rows, V]
  int long_rows = 0;
};
ReferenceLogits load_reference_logits(const std::string& path);  // throws lily::Error naming file and tensor

struct PerplexityResult {
  double nll_sum = 0;
  int64_t scored = 0;    // tokens predicted (every id but the first)
  int windows = 0;
  double ppl() const;
};
// Perplexity of ids[1..] with windows of `window` tokens advanced by `stride` (stride <= window): each window
// runs on a fresh state and scores only the tokens no earlier window scored, so every token after the first
// is scored once with up to `window - 1` tokens of context.
PerplexityResult windowed_perplexity(Backend& be, const std::vector<int32_t>& ids, int window, int stride, int chunk);

}  // namespace lily
