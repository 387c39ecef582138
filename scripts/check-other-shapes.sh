#!/usr/bin/env bash
# Makes the `shapes8` fixture (tools/fixtures/presets-other-shapes.json: hidden 384, 8 layers, 6 query / 2 KV
# heads of 128, DeltaNet 2 key / 6 value heads of 64, 24 experts top-6 of size 192, shared expert 256) with
# transformers, then compares every backend of BUILD_DIR/lily against it with `lily eval` (fast-path bound:
# top-1 >= 0.97, mean KL <= 1e-3). Needs torch, transformers and tokenizers; no network.
# Usage: scripts/check-other-shapes.sh [BUILD_DIR] [FIXTURE_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
F=${2:-/tmp/lily-shapes8}
FIXTURE_PRESETS=tools/fixtures/presets-other-shapes.json python3 tools/fixtures/make_fixtures.py "$F" shapes8 || exit 1
backends="cpu-ref cpu"
"$B/lily" run --backend cuda --prompt x --max-tokens 1 >/dev/null 2>&1 && backends="$backends cuda"
status=0
for layout in bf16 mlx-4bit; do
  for be in $backends; do
    echo "-- $layout $be"
    "$B/lily" eval --model "$F/model-$layout" --ref "$F/reference-$layout.safetensors" --backend "$be" \
      --min-top1 0.97 --max-kl 1e-3 2>&1 | tail -7 || status=1
  done
done
exit $status
