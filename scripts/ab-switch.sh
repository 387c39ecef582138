#!/usr/bin/env bash
# Same-binary A/B of one environment switch on the GPU machine: `lily cudabench` once per value, the values
# alternated ROUNDS times (default 2), so that the machine's drift between device calls does not enter the
# comparison. Prints one line per run: "VAR=value round: ctx:tok/s ...".
# Usage: scripts/ab-switch.sh LILY_BIN VAR "v1 v2 ..." [cudabench args]   (default args: --ctx 256,4096,32768
# --steps 256 --sampled 0). Example: scripts/ab-switch.sh build-dev/lily LILY_CUDA_MOE_SH_FIRST "1 0"
set -uo pipefail
bin=${1:?lily binary}
var=${2:?environment variable}
vals=${3:?values}
shift 3
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--ctx 256,4096,32768 --steps 256 --sampled 0)
for r in $(seq "${ROUNDS:-2}"); do
  for v in $vals; do
    out=$(env "$var=$v" "$bin" cudabench "${args[@]}" 2>&1)
    rc=$?
    echo "$var=$v $r: $(printf '%s\n' "$out" | awk '$1 ~ /^[0-9]+$/ {printf "%s:%s ", $1, $4}')(exit $rc)"
  done
done
