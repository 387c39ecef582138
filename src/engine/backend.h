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
  // Becomes a copy of `other` (made by the same backend); used to rewind after a rejected speculation. Backends
  // without speculative decoding keep the default, which throws.
  virtual void assign(const SeqState& other);
};

// What Backend::verify remembers so that Backend::accept can leave the state as if fewer tokens had been forwarded.
struct VerifyUndo {
  virtual ~VerifyUndo() = default;
};

struct ForwardOptions {
  int prefill_chunk = 0;                   // tokens per chunk (scratch is bounded by it); 0: the backend's default
  std::function<bool()> cancelled;         // checked between chunks; true -> throws lily::Cancelled
  std::function<void(int done, int total)> progress;  // called after each chunk
  // Called after each chunk with the main model's hidden states after the final norm, hidden [n, H], for the
  // positions row0 .. row0+n-1 (absolute). Valid during the call only (the multi-token-prediction prefill).
  // Backends whose mtp_available() is true call it; the others may ignore it.
  std::function<void(const float* hidden, int row0, int n)> on_hidden;
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

  // ---- Speculative decoding (engine/speculative.h) ----
  // Multi-token prediction: whether this backend runs the checkpoint's MTP block (weights loaded and implemented).
  virtual bool mtp_available() const { return false; }
  // Why not, when !mtp_available() (for messages).
  virtual std::string mtp_unavailable_reason() const { return name() + ": multi-token prediction is not available on this backend"; }
  // Empty when speculative decoding should be on by default where available; else why it is off unless asked for
  // (`--mtp K`), e.g. a verify that cannot be faster than plain decoding.
  virtual std::string mtp_default_off_reason() const { return ""; }
  // The draft tokens per step when `--mtp` is not given: the count whose verify pays best on this backend.
  virtual int mtp_default_drafts() const { return 3; }
  // Runs the MTP block on n rows: row i pairs hidden[i] ([H], the main model's final-normed hidden state at position
  // pos0+i, or a chained MTP output) with ids[i] (the token that follows that position), at rotary position pos0+i.
  // Appends n rows to the state's MTP KV cache (the rows attend to every row before them in that cache). Writes the
  // logits of the last n_logits rows to logits [n_logits, V] and the block's output after its final norm for all n
  // rows to hidden_out [n, H] (may be null).
  virtual void mtp_forward(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0, int n_logits,
                           float* logits, float* hidden_out);
  // Rows in the state's MTP KV cache, and dropping the rows beyond `rows`.
  virtual int mtp_rows(const SeqState& st) const;
  virtual void mtp_truncate(SeqState& st, int rows);
  // Verify: forward ids[0..n) at st.pos with the logits of every position (logits [n, V]) and the final-normed
  // hidden states (hidden [n, H], may be null); returns what accept() needs. accept(st, undo, m) with 1 <= m <= n
  // leaves st exactly as if only ids[0..m) had been forwarded (KV caches, DeltaNet conv and recurrent states,
  // position). The default keeps a clone of the state and, for m < n, assigns it back and forwards the m tokens
  // again (recompute); a backend may instead keep per-position recurrent states during the verify forward and
  // make accept a copy of the m-th one plus a KV truncation.
  virtual std::unique_ptr<VerifyUndo> verify(SeqState& st, const int32_t* ids, int n, float* logits, float* hidden);
  virtual void accept(SeqState& st, VerifyUndo& undo, int m);
  // The greedy forms, for rows whose token is the plain argmax (no penalties): verify_argmax is verify with
  // ids_out[i] = the argmax of row i's logits (the lowest id among equal maxima; NaN counts as -inf) in place of the
  // logits; mtp_argmax is mtp_forward with the argmax of the last row's logits returned in place of them. The
  // defaults run the logit forms and take the argmax on the host; a backend that has the argmax on its device
  // copies only the ids.
  virtual std::unique_ptr<VerifyUndo> verify_argmax(SeqState& st, const int32_t* ids, int n, int32_t* ids_out,
                                                    float* hidden);
  virtual int32_t mtp_argmax(SeqState& st, const int32_t* ids, const float* hidden, int n, int pos0,
                             float* hidden_out);
};

}  // namespace lily
