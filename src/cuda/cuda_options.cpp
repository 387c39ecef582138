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
  // The index is the PrefillPrec. Default split (A to ~22 bits as two fp16 parts): the mode that holds top-1 >=
  // 99% and mean KL <= 1e-3 against transformers on the fixtures of scripts/check-fidelity.sh (docs/cuda-prefill.md,
  // precision); fp16 (11-bit operands) loses 2-3% of top-1 on the 8-layer ones (hidden 1024, 64 experts); bf16
  // 8-25%; mixed (fp16 on the expert GEMMs and the lm_head, split on the rest) lies between.
  o.prefill_prec = env_choice("LILY_CUDA_PREFILL_PRECISION", {"bf16", "fp16", "split", "mixed"}, 2);
  o.router_y = env_on("LILY_CUDA_ROUTER_Y", true);
  o.int8_x = env_on("LILY_CUDA_INT8_X", true);
  return o;
}

}  // namespace lily::cuda
