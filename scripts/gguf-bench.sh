#!/usr/bin/env bash
# GGUF speed check for a machine with an NVIDIA GPU: writes the synthetic full-size model as a Q4_K_M-like
# GGUF (`lily synth --gguf`), then runs `lily bench` on it and on the same synthetic model in MLX 4-bit form,
# on CUDA and on the CPU. Usage: scripts/gguf-bench.sh BUILD_DIR OUT_DIR (BUILD_DIR holds lily built with
# CUDA; OUT_DIR receives the GGUF's load log and the four bench outputs). Needs ~25 GB of disk for the file.
set -uo pipefail
B=${1:-build}
OUT=${2:-gguf-bench-out}
mkdir -p "$OUT"
F=${GGUF_FILE:-/tmp/lily-synth-q4km.gguf}
echo "== writing $F"
( time "$B/lily" synth --gguf "$F" ) > "$OUT/synth.log" 2>&1
tail -3 "$OUT/synth.log"
for be in cuda cpu; do
  echo "== bench $be: GGUF Q4_K_M-like"
  "$B/lily" bench --model "$F" --backend $be > "$OUT/bench-gguf-$be.txt" 2>&1
  grep -E "^gguf:|prefill|decode" "$OUT/bench-gguf-$be.txt" | head -20
  echo "== bench $be: synthetic MLX 4-bit (same preset)"
  "$B/lily" bench --synthetic qwen3.6-35b-a3b --backend $be > "$OUT/bench-mlx-$be.txt" 2>&1
  grep -E "prefill|decode" "$OUT/bench-mlx-$be.txt" | head -20
done
