// The one narrow interface between the engine (generation, server, bench) and a compute backend (CPU, CUDA).
// A backend owns the model's weights in its memory and runs tokens through the model for a SeqState.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>
#include <memory>
#include <string>

#include "model/weights.h"

namespace lily {

// Constrained decoding (json_schema, forced tool calls): fills the allowed-token bitmask of the next token
// (mask_words(vocab) words, bit i % 32 of word i / 32: engine/vocab_trie.h) and returns true, or returns false when no
// token may come next (decoding stops there).
using TokenMaskFn = std::function<bool(uint32_t* words)>;

// Everything one sequence needs to continue: KV cache of the full-attention layers, conv and recurrent
// state of the DeltaNet layers, and the position. Copyable (clone) for the session cache and speculation.
struct SeqState {
  int pos = 0;        // tokens already consumed
  int max_ctx = 0;    // KV capacity in tokens
  virtual ~SeqState() = default;
  virtual std::unique_ptr<SeqState> clone() const = 0;
  virtual size_t bytes() const = 0;  // memory held
};

struct ForwardOptions {
  int prefill_chunk = 0;                   // tokens per chunk (scratch is bounded by it); 0: the backend's default
  std::function<bool()> cancelled;         // checked between chunks; true -> throws lily::Cancelled
  std::function<void(int done, int total)> progress;  // called after each chunk
};

class StepSampler;  // engine/step_sampler.h

struct Cancelled : std::exception {
  const char* what() const noexcept override { return "cancelled"; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  // Prompt tokens per forward() chunk when ForwardOptions::prefill_chunk is 0 (CPU 512; CUDA its largest chunk).
  virtual int default_prefill_chunk() const { return 512; }
  int prefill_chunk_or_default(int requested) const { return requested > 0 ? requested : default_prefill_chunk(); }
  virtual std::unique_ptr<SeqState> new_state(int max_ctx) = 0;
  // Consumes ids[0..n) at st.pos (st.pos += n). Writes the logits of the last n_logits positions to
  // out [n_logits, vocab] (n_logits in 0..n; out may be null when n_logits == 0).
  virtual void forward(SeqState& st, const int32_t* ids, int n, int n_logits, float* out,
                       const ForwardOptions& opt) = 0;
  // Greedy decoding of n_steps tokens: consumes first_id, then each id it produces (st.pos += n_steps), and
  // writes the argmax after each consumed token to out_ids[0..n_steps) (ties -> lower id). Backends override it
  // to keep the ids on the device (no full-vocab logits copy, no host round trip per token).
  virtual void decode_argmax(SeqState& st, int n_steps, int32_t first_id, int32_t* out_ids) {
    std::vector<float> logits(size_t(config().vocab));
    int32_t id = first_id;
    for (int i = 0; i < n_steps; ++i) {
      forward(st, &id, 1, 1, logits.data(), ForwardOptions{});
      id = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
      out_ids[i] = id;
    }
  }
  // Sampled decoding: consumes first_id, then after each consumed token picks the next with `sampler` (which
  // records it) and passes it to on_token, in order; on_token returns false to stop. At most max_steps tokens are
  // sampled and consumed. One step of lookahead: when on_token(s_j) returns false the state has also consumed s_j
  // (unless j == max_steps), i.e. st.pos grows by min(j + 1, max_steps), and the return value is that count.
  // last_logits (optional, [vocab]): the raw logits after the last consumed token. The default runs forward() per
  // token and samples on the host; the CUDA backend samples on the device inside the step's graph and reads the ids
  // asynchronously (engine/step_sampler.h has the algorithm). Exceptions from on_token propagate (the state is then
  // unspecified).
  // mask (optional): called before each token is sampled, after on_token of the one before; the token is sampled
  // from the allowed ones only (the others' logits count as -inf), and a false return stops decoding before it (the
  // state has then consumed every token passed to on_token). The CUDA backend uploads the mask and applies it inside
  // its step sampler (only the id comes back), computing it while the step's layers run.
  virtual int decode_sample(SeqState& st, StepSampler& sampler, int32_t first_id, int max_steps,
                            const std::function<bool(int32_t)>& on_token, float* last_logits = nullptr,
                            const TokenMaskFn& mask = {});
  // Timing only (`lily bench --decode-context unfilled`): st holds n positions of zeros (KV rows of zeros, the
  // recurrent state as it is) without computing them, so that decoding at a long context can be timed without its
  // prefill; the logits that follow are meaningless. Backends without it throw.
  virtual void fill_context_for_timing(SeqState& st, int n);
};

}  // namespace lily
