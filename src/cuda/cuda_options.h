// The CUDA backend's options, parsed from the LILY_CUDA_* variables and LILY_PROFILE once per backend by
// CudaOptions::from_env (src/cuda/cuda_options.cpp, host code that the CPU-only build compiles too, so its tests
// run without a GPU) and passed down; kernels and launchers read no environment. docs/configuration.md lists them.
#pragma once

namespace lily::cuda {

struct CudaOptions {
  // LILY_CUDA_LAUNCH=graph (default) | graph-nopdl | direct | direct-nopdl
  bool graph = true;           // the step replayed as a captured CUDA graph (else its kernels launched directly)
  bool pdl = true;             // programmatic dependent launch between the step's kernels
  // LILY_PROFILE=1: no graph, events between the decode kernels and per-phase prefill times, printed at exit
  bool profile = false;
  int trace = 0;               // LILY_PROFILE=trace: 1, globaltimer stamps in the first attention and DeltaNet
                               // layers and at every layer's end, printed at exit; trace-blocks: 2, also
                               // per-block stamps of the first DeltaNet layer's two MoE kernels
  bool device_sampler = true;  // LILY_CUDA_SAMPLER=host: decode_sample samples on the host (the Backend default)
  // LILY_CUDA_PREFILL=batched (default) | simple | decode
  bool prefill = true;         // decode: prompts run through the decode step token by token
  bool prefill_simple = false; // simple: the reference (non-tensor-core) prefill GEMM/attention
  int prefill_max_chunk = 0;   // LILY_CUDA_PREFILL_MAX_CHUNK: prompt tokens per chunk at most (scratch sized by it);
                               // 0: 4096 on devices with >= 40 GiB, else 2048
  int prefill_prec = 2;        // LILY_CUDA_PREFILL_PRECISION=bf16|fp16|split|mixed: GEMM operands, a PrefillPrec
                               // (prefill/prefill.h: 0 bf16, 1 fp16, 2 split, 3 mixed)
  bool router_y = true;        // LILY_CUDA_ROUTER_Y=0: the router's own rows in the MoE kernel (the reference for
                               // router-from-y, router_y.h, which the layers whose shapes allow it use by default)
  bool int8_x = true;          // LILY_CUDA_INT8_X=0: f32 activations in the 4-bit decode GEMVs (reference for the
                               // int8 hi + lo form with dp4a)
  // Throws lily::Error naming the variable for a value that is not one of its choices, and for a retired name.
  static CudaOptions from_env();
};

}  // namespace lily::cuda
