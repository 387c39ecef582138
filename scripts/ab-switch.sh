#!/usr/bin/env bash
# Same-binary A/B of one LILY_* variable (docs/configuration.md) on a GPU machine: `lily bench` decode on the
# synthetic full-size model once per value, the values alternated ROUNDS times (default 2), so that the machine's
# drift over the runs does not enter the comparison. Prints one line per run: "VAR=value round: ctx:tok/s ...".
# Usage: scripts/ab-switch.sh LILY_BIN VAR "v1 v2 ..." [bench args]   (default args: --synthetic qwen3.6-35b-a3b
# --backend cuda --prefill-lengths 256 --decode-contexts 256,4K,32K --decode-context unfilled --decode-steps 256
# --reps 1). Example: scripts/ab-switch.sh build-dev/lily LILY_CUDA_ROUTER_Y "1 0"
set -uo pipefail
bin=${1:?lily binary}
var=${2:?environment variable}
vals=${3:?values}
shift 3
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--synthetic qwen3.6-35b-a3b --backend cuda --prefill-lengths 256
  --decode-contexts 256,4K,32K --decode-context unfilled --decode-steps 256 --reps 1)
for r in $(seq "${ROUNDS:-2}"); do
  for v in $vals; do
    out=$(env "$var=$v" "$bin" bench "${args[@]}" 2>&1)
    rc=$?
    # the decode table's rows: "          <context> <tok/s median> [min, max] ..."
    echo "$var=$v $r: $(printf '%s\n' "$out" | awk '/^decode +context/ {d = 1; next} /^[a-z]/ {d = 0}
      d && $1 ~ /^[0-9]+K?$/ {printf "%s:%s ", $1, $2}')(exit $rc)"
  done
done
