#!/usr/bin/env bash
# Speculative decoding with the MTP block on CUDA, timed on the synthetic full-size model. Its weights are random,
# so the block's own drafts are never right: acceptance is emulated (--mtp-accept P: each draft replaced, with
# probability P, by the token plain greedy decoding produced there; every kernel still runs). For k = 1..4 drafts
# per round and P in {0, 0.5, 0.7, 0.86, 1}: tok/s at decode contexts 256, 4K and 32K (and 128K with
# MTP_BENCH_128K=1), and the cost of one verify step of k+1 positions against one plain decode step.
# Usage: scripts/mtp-bench.sh BUILD_DIR OUT_DIR (BUILD_DIR holds lily built with CUDA; OUT_DIR receives one text
# report and one JSON per k). MTP_BENCH_KS="1 2" restricts k, MTP_BENCH_CTX=256,4096 the contexts.
set -uo pipefail
B=${1:-build}
OUT=${2:-mtp-bench-out}
mkdir -p "$OUT"
ctx=${MTP_BENCH_CTX:-256,4096,32768}
if [ "${MTP_BENCH_128K:-0}" = 1 ]; then ctx=$ctx,131072; fi
for k in ${MTP_BENCH_KS:-1 2 3 4}; do
  echo "== k=$k"
  "$B/lily" bench --backend cuda --synthetic qwen3.6-35b-a3b --mtp "$k" --mtp-accept 0,0.5,0.7,0.86,1 \
    --prefill-lengths 256 --decode-contexts "$ctx" --decode-steps 64 --reps 1 --json "$OUT/mtp-k$k.json" \
    > "$OUT/mtp-k$k.txt" 2>&1
  echo "exit $?"
  grep -E -A5 "^(decode|mtp) " "$OUT/mtp-k$k.txt" | grep -v "^--$"
done
