// `lily bench --mtp K [--mtp-accept P,..]`: speculative decoding timed at each decode context. For every P (or the
// MTP block's own drafts when none is given), a fresh state is prefilled (its MTP rows filled, not timed) and
// decode_steps tokens are decoded greedily through engine/speculative.h with K drafts per round; with P each draft
// is replaced, with probability P, by the token plain greedy decoding produced there (recorded first: the bench's
// own plain run), so that acceptance is about P while every kernel runs ("emulated" in the report). The output must
// equal the plain run's ids. Also timed: one verify forward of K+1 positions, one plain decode step, and the K MTP
// forwards of one round's drafting, each the median of 8 runs on clones of the prefilled state.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/backend.h"

namespace lily {

struct MtpBenchRun {
  double accept_p = -1;        // < 0: the MTP block's own drafts; else emulated acceptance
  double tok_s = 0;            // decode_steps / wall time of the speculative decode
  int64_t drafted = 0, accepted = 0, rounds = 0;
  bool identical = false;      // the ids equal the plain greedy run's
};

struct MtpBenchLength {
  int k = 0;
  // as greedy decoding runs them (medians): one plain step with its argmax (decode_argmax), verify_argmax of k + 1
  // rows, k chained drafts (mtp_argmax)
  double plain_step_ms = 0, verify_step_ms = 0, draft_ms = 0;
  std::vector<MtpBenchRun> runs;
};

// prompt: the context's ids; first_id: the greedy token after it; plain: the plain greedy ids after first_id.
MtpBenchLength bench_mtp_at(Backend& be, const std::vector<int32_t>& prompt, int32_t first_id,
                            const std::vector<int32_t>& plain, int k, const std::vector<double>& accept_ps,
                            int prefill_chunk);

}  // namespace lily
