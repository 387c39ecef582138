#!/usr/bin/env bash
# The 8-bit-code weight formats on a GPU machine (FP8 e4m3 and GGUF Q6_K kept as codes with f32 scales): their
# kernel and whole-model tests, the affine kernel tests that share the dispatch, and `lily bench` on the synthetic
# full-size model in the FP8 release's layout beside the MLX 4-bit one, on the same machine (prefill 4K / 8K,
# decode after 256 / 4K of context, against the device's measured limits).
# Usage: scripts/gpu-fp8.sh BUILD_DIR OUT_DIR (BUILD_DIR holds lily and lily_tests built with CUDA).
set -uo pipefail
B=${1:-build}
OUT=${2:-gpu-out}
mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
echo "== tests"
timeout 240 "$B/lily_tests" --gtest_filter='CudaCode8Forms*:CudaFormats*:CudaAffineForms*:CudaRouterY*' \
  > "$OUT/code8_tests.log" 2>&1
echo "exit $?"; grep -E "^\[  (PASSED|FAILED) |tests ran|FAILED" "$OUT/code8_tests.log" | head -40
for fmt in fp8 mlx-4bit; do
  echo "== bench $fmt"
  timeout 150 "$B/lily" bench --backend cuda --synthetic qwen3.6-35b-a3b --synthetic-format $fmt --limits \
    --limits-seconds 2 --prefill-lengths 4K,8K --decode-contexts 256,4K --reps 2 --json "$OUT/bench-$fmt.json" \
    > "$OUT/bench-$fmt.txt" 2>&1
  echo "exit $?"; tail -25 "$OUT/bench-$fmt.txt"
done
