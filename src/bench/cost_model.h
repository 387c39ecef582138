// What one token costs, computed from the model's weights: bytes touched by a decode step and FLOPs of a
// prefill. Used to turn measured tokens/s into GB/s and TFLOP/s.
#pragma once
#include <cstdint>

#include "model/weights.h"

namespace lily {

struct DecodeBytes {
  uint64_t dense = 0;      // every non-expert matrix (attention/GDN projections, router, shared expert)
  uint64_t experts = 0;    // top_k routed experts per layer (gate + up + down)
  uint64_t lm_head = 0;
  uint64_t embed_row = 0;  // one embedding row
  uint64_t kv = 0;         // KV cache read at this context
  uint64_t recurrent = 0;  // DeltaNet state (S and conv) read and written
  uint64_t total() const { return dense + experts + lm_head + embed_row + kv + recurrent; }
};

// kv_elem_bytes: bytes per cached K/V element of the backend (4 for the f32 CPU cache, 2 for the CUDA fp16 cache).
DecodeBytes decode_bytes_per_token(const ModelWeights& w, int64_t context, int kv_elem_bytes);

// Parameters multiplied per token: non-expert matrices + top_k experts + lm_head (not the embedding).
uint64_t active_params(const ModelWeights& w);

// FLOPs of a prefill of `tokens` tokens from position 0: 2 * active params * tokens, plus causal attention
// (QK^T and PV over the visible prefix) and the DeltaNet recurrence (~8 Dk Dv per value head per token).
double prefill_flops(const ModelWeights& w, int64_t tokens);

}  // namespace lily
