// Speculative decoding with the checkpoint's multi-token-prediction (MTP) block, backend-generic.
//
// One round, with the state at position P (tokens 0..P-1 consumed) and the next token `cur` chosen:
//  1. Draft: the MTP block runs on the main model's pending hidden rows (positions whose MTP row is not computed
//     yet, each paired with the token that followed it; the last pairs with cur), then chains k-1 more rows on its
//     own output; k draft tokens d_0..d_{k-1}. The chained rows are dropped from the MTP cache afterwards (their
//     positions are recomputed from the main model's hidden states next round).
//  2. Verify: [cur, d_0..d_{k-1}] in one forward of k+1 positions (Backend::verify: logits at every position).
//  3. Accept: greedy keeps the longest prefix of drafts equal to the target's argmax and adds the target's token
//     after it (correction or bonus), so the output is the one plain greedy decoding gives. Sampled requests use
//     the speculative-sampling rule (accept d with probability min(1, p(d)/q(d)), else draw from
//     max(0, p - q) normalised; all accepted: a bonus token from the last row), which leaves the distribution of
//     the output equal to plain sampling's.
//  4. Backend::accept rewinds the state to the consumed tokens, exactly where plain decoding would be.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/backend.h"

namespace lily {

class StepSampler;

struct MtpConfig {
  int k = 0;                // draft tokens per round (0: plain decoding)
  bool auto_off = true;     // a request goes on without drafts once its measured time per token exceeds plain's
  // Emulation (`lily bench --mtp-accept P`): draft i of the reply is replaced, with probability accept_p, by
  // oracle[i] (the token plain greedy decoding produced there), so that acceptance is about accept_p while every
  // kernel runs. oracle null: the MTP block's own drafts.
  const std::vector<int32_t>* oracle = nullptr;
  double accept_p = 0;
  uint64_t seed = 0x5eed;   // drafts drawn from q, acceptance tests, emulation
};

struct MtpStats {
  int64_t drafted = 0, accepted = 0;  // draft tokens proposed / kept
  int64_t rounds = 0;                 // verify forwards with at least one draft
  bool switched_off = false;          // auto_off ended the drafting for this request
  double draft_s = 0, verify_s = 0, plain_s = 0;  // time in MTP forwards, in verify rounds, in plain steps
  int64_t plain_steps = 0;
};

// The final-normed hidden state of the last consumed position (`pos`), whose MTP row waits for the next token.
struct MtpCarry {
  std::vector<float> hidden;  // [H]
  int pos = -1;
};

// A ForwardOptions::on_hidden hook for forwarding a prefix of `ids` (absolute positions = indices): computes the MTP
// rows of the positions whose next token is in `ids`, and keeps the last position's hidden state in `carry`.
std::function<void(const float*, int, int)> mtp_prefill_hook(Backend& be, SeqState& st,
                                                             const std::vector<int32_t>& ids, MtpCarry& carry);

// Backend::decode_sample's contract with speculation: consumes first_id, then after each consumed token the next is
// chosen (sampler records it) and passed to on_token in order; false stops. At most max_steps tokens are chosen.
// Returns the tokens the state consumed: the chosen tokens before the last (and first_id), or all of them when
// the last was consumed as part of a verified run (then last_logits, when not null, holds the logits after it).
// carry (may be null): the hidden state of the position before first_id, from the prefill.
int mtp_decode(Backend& be, SeqState& st, StepSampler& sampler, int32_t first_id, int max_steps,
               const std::function<bool(int32_t)>& on_token, float* last_logits, const MtpCarry* carry,
               const MtpConfig& cfg, MtpStats* stats);

// The speculative-sampling acceptance of one draft token d drawn from q, against the target p (both [V]):
// accepted with probability min(1, p[d] / q[d]) (u uniform in [0, 1)); when rejected, returns the token drawn
// (with u2) from max(0, p - q) normalised (p itself when that is all zero). Returns -1 when d is accepted.
int32_t spec_accept(const std::vector<double>& p, const std::vector<double>& q, int32_t d, double u, double u2);

// Draws an index from a distribution with u uniform in [0, 1) (inverse CDF in id order).
int32_t draw_index(const std::vector<double>& prob, double u);

}  // namespace lily
