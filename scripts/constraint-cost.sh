#!/usr/bin/env bash
# Per-token cost of constrained decoding (json_object, json_schema, a forced tool call) next to free text,
# on a `lily serve` it starts (tools/serve/constraint_cost.py does the timing). With the CUDA backend free
# text samples on the GPU (decode_sample) while the constrained modes copy the logits to the host each step,
# so the difference is the cost of that round trip plus the constraint.
#   scripts/constraint-cost.sh [MODEL_DIR|demo] [BACKEND]
# No MODEL_DIR: the synthetic full-size checkpoint (random weights, real shapes) written once by `lily synth`
# to ${TMPDIR:-/tmp}/lily-synth-qwen36 (about 20 GB). `demo`: the bundled tiny model.
set -euo pipefail
cd "$(dirname "$0")/.."
LILY=${LILY_BIN:-build/lily}
MODEL=${1:-}
BACKEND=${2:-auto}
args=()
if [ "$MODEL" != demo ]; then
  if [ -z "$MODEL" ]; then
    MODEL=${TMPDIR:-/tmp}/lily-synth-qwen36
    [ -f "$MODEL/config.json" ] || "$LILY" synth --out "$MODEL" --preset qwen3.6-35b-a3b
  fi
  args=(--model "$MODEL")
fi
log=$(mktemp)
"$LILY" serve "${args[@]}" --backend "$BACKEND" --port 0 --ctx 4096 > "$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; rm -f "$log"' EXIT
until url=$(grep -o 'http://[0-9.:]*' "$log"); do
  kill -0 $pid 2>/dev/null || { cat "$log"; exit 1; }
  sleep 1
done
grep 'listening' "$log"
python3 tools/serve/constraint_cost.py --url "$url" --tokens "${TOKENS:-256}" --reps "${REPS:-3}"
