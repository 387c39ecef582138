#!/usr/bin/env bash
# GGUF speed check (issue 43 item 5): `lily bench` on the synthetic full-size model as MLX 4-bit and as the
# Q4_K_M-like GGUF `lily synth --gguf` writes, here made in memory and read by the GGUF loader
# (--synthetic-format gguf-q4km: no 21 GB file), prefill 4K and decode 64 steps at contexts 256 and 4K.
# Usage: scripts/gguf-bench.sh BUILD_DIR OUT_DIR [BACKEND ...]   (backends: cuda and/or cpu; default cuda)
# OUT_DIR receives bench-{mlx,gguf}-BACKEND.{txt,json} (the GGUF load log is in the .txt). With WRITE_FILE=1 it
# first times `lily synth --gguf` writing the full-size file (about 21 GB of disk; removed afterwards). PRESET=NAME
# runs another synthetic preset (e.g. medium: every matrix of the real model, 4 layers).
set -uo pipefail
B=${1:-build}
OUT=${2:-gguf-bench-out}
shift 2 2>/dev/null || shift $#
BACKENDS=("$@")
[ ${#BACKENDS[@]} -eq 0 ] && BACKENDS=(cuda)
PRESET=${PRESET:-qwen3.6-35b-a3b}
mkdir -p "$OUT"
if [ "${WRITE_FILE:-0}" = 1 ]; then
  F=${GGUF_FILE:-/tmp/lily-synth-q4km.gguf}
  echo "== writing $F"
  ( time "$B/lily" synth --gguf "$F" --preset "$PRESET" ) > "$OUT/synth.log" 2>&1
  tail -4 "$OUT/synth.log"
  rm -f "$F"
fi
for be in "${BACKENDS[@]}"; do
  if [ "$be" = cuda ]; then LEN=4K; CTX=256,4K; else LEN=512; CTX=256; fi
  for fmt in mlx-4bit gguf-q4km; do
    tag=${fmt%%-*}
    echo "== bench $be: synthetic $PRESET, $fmt"
    "$B/lily" bench --synthetic "$PRESET" --synthetic-format $fmt --backend "$be" --prefill-lengths $LEN \
      --decode-contexts $CTX --decode-context unfilled --reps 1 --json "$OUT/bench-$tag-$be.json" \
      > "$OUT/bench-$tag-$be.txt" 2>&1
    grep -a "model ready in" "$OUT/bench-$tag-$be.txt"
    tail -n 6 "$OUT/bench-$tag-$be.txt"
  done
done
