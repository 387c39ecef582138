#include "cuda/cuda_options.h"

#include "core/env.h"

namespace lily::cuda {

CudaOptions CudaOptions::from_env() {
  reject_retired_env();
  CudaOptions o;
  const int launch = env_choice("LILY_CUDA_LAUNCH", {"graph", "graph-nopdl", "direct", "direct-nopdl"}, 0);
  o.graph = launch < 2;
  o.pdl = launch % 2 == 0;
  const ProfileMode prof = profile_mode_from_env();
  o.profile = prof == ProfileMode::kPhases;
  if (o.profile) o.graph = false;  // events between the kernels
  o.trace = prof == ProfileMode::kTrace ? 1 : prof == ProfileMode::kTraceBlocks ? 2 : 0;
  const int prefill = env_choice("LILY_CUDA_PREFILL", {"batched", "simple", "decode"}, 0);
  o.prefill = prefill != 2;
  o.prefill_simple = prefill == 1;
  o.prefill_max_chunk = int(env_count("LILY_CUDA_PREFILL_MAX_CHUNK", 16, 16384, 0));  // tokens
  o.device_sampler = env_choice("LILY_CUDA_SAMPLER", {"device", "host"}, 0) == 0;
  // Default fp16 (A / 2^(e-15) per row, 11-bit significands, 8x finer than the bf16 operands other engines use):
  // on the H200, small fixture (real head sizes), prompt logits within 0.05 (bf16 checkpoint) / 0.09 (MLX 4-bit)
  // of the transformers reference with top-1 1.000; split (two fp16 parts) keeps 0.011 / 0.013 but its second MMA
  // costs 23% of the 4K prefill (22,964 vs 17,787 tok/s); bf16: 1.07 with top-1 0.875. The index is the PrefillPrec.
  o.prefill_prec = env_choice("LILY_CUDA_PREFILL_PRECISION", {"bf16", "fp16", "split"}, 1);
  o.router_y = env_on("LILY_CUDA_ROUTER_Y", true);
  o.int8_x = env_on("LILY_CUDA_INT8_X", true);
  return o;
}

}  // namespace lily::cuda
