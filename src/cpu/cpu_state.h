// Per-sequence decode state of the CPU backend. KV rows grow with the sequence (only used rows are held
// and cloned); DeltaNet conv and recurrent states are fixed-size and fp32.
#pragma once
#include <memory>
#include <vector>

#include "engine/backend.h"

namespace lily {

struct CpuLayerState {
  // full-attention layers
  std::vector<float> k, v;      // [pos][n_kv][head_dim] each
  // DeltaNet layers
  std::vector<float> conv;      // [K-1][conv_dim] raw pre-conv inputs, oldest first
  std::vector<float> S;         // [Hv][Dv][Dk] fp32 recurrent state
};

struct CpuState final : SeqState {
  std::vector<CpuLayerState> layers;  // [n_layers]
  CpuLayerState mtp;                  // the multi-token-prediction layer's KV cache (k, v: [rows][n_kv][head_dim])
  std::unique_ptr<SeqState> clone() const override { return std::make_unique<CpuState>(*this); }
  void assign(const SeqState& other) override;
  size_t bytes() const override {
    size_t b = (mtp.k.size() + mtp.v.size()) * sizeof(float);
    for (const auto& l : layers) b += (l.k.size() + l.v.size() + l.conv.size() + l.S.size()) * sizeof(float);
    return b;
  }
};

}  // namespace lily
