#!/usr/bin/env bash
# Per-token cost of constrained decoding (json_object, json_schema, a forced tool call) next to free text,
# on a `lily serve` it starts (tools/serve/constraint_cost.py does the timing). Every mode samples through
# decode_sample; the constrained ones add the host's allowed-token mask per token. With the CUDA backend the
# server runs twice: the device sampler (the mask uploaded and applied on the GPU, only the id read back) and
# LILY_CUDA_SAMPLER=host (the logits copied back each token, the mask applied on the host). TEMPERATURE=T
# samples instead of greedy decoding (the default).
#   scripts/constraint-cost.sh [MODEL_DIR|demo] [BACKEND]
# No MODEL_DIR: the synthetic full-size checkpoint (random weights, real shapes) written once by `lily synth`
# to ${TMPDIR:-/tmp}/lily-synth-qwen36 (about 20 GB; SYNTH_DIR and SYNTH_PRESET=small|... choose another), with the
# Qwen3.5 chat template of tests/fixtures added. `demo`: the bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
LILY=${LILY_BIN:-build/lily}
MODEL=${1:-}
BACKEND=${2:-auto}
args=()
if [ "$MODEL" != demo ]; then
  if [ -z "$MODEL" ]; then
    MODEL=${SYNTH_DIR:-${TMPDIR:-/tmp}/lily-synth-qwen36}
    [ -f "$MODEL/config.json" ] || "$LILY" synth --out "$MODEL" --preset "${SYNTH_PRESET:-qwen3.6-35b-a3b}"
    # lily synth writes no chat template: the server needs one (the Qwen3.5 template the tests use)
    [ -f "$MODEL/chat_template.jinja" ] || cp tests/fixtures/qwen35-chat/Qwen3.5-4B.jinja "$MODEL/chat_template.jinja"
  fi
  args=(--model "$MODEL")
fi
samplers=(device)
[ "$BACKEND" = cuda ] && samplers=(device host)
log=$(mktemp)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; rm -f "$log"' EXIT
for sampler in "${samplers[@]}"; do
  : > "$log"
  LILY_CUDA_SAMPLER=$sampler "$LILY" serve "${args[@]}" --backend "$BACKEND" --port 0 --ctx 4096 > "$log" 2>&1 &
  pid=$!
  until url=$(grep -o 'http://[0-9.:]*' "$log"); do
    kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
    sleep 1
  done
  if [ "$BACKEND" = cuda ]; then echo "== LILY_CUDA_SAMPLER=$sampler"; fi
  grep 'listening' "$log"
  python3 tools/serve/constraint_cost.py --url "$url" --tokens "${TOKENS:-256}" --reps "${REPS:-3}" \
    --temperature "${TEMPERATURE:-0}"
  kill $pid
  wait $pid 2>/dev/null || true
  pid=
done
