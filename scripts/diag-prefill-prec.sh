#!/usr/bin/env bash
# Which part of the fp16 prefill loses fidelity: makes the fid8 and fid6 fixtures (bf16 and MLX 4-bit layouts,
# tools/fixtures/presets-fidelity.json) with transformers, then `lily eval --backend cuda` on each with the
# temporary LILY_DIAG_* switches of PrefillRunner: split precision on one GEMM role group only (fp16 on the
# rest), on all but one group, the DeltaNet scan form (tc / seq), the GEMM kernel (v2 / wg), the reference
# attention. One table of top-1 / mean KL / max |dlogit| per configuration.
# Usage: scripts/diag-prefill-prec.sh BUILD_DIR OUT_DIR [WORK_DIR]   (FIXTURES="fid8 fid6", REUSE=1)
set -uo pipefail
cd "$(dirname "$0")/.."
B=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-diag-out}")
W=$(realpath -m "${3:-/tmp/lily-diag}")
FIXTURES=${FIXTURES:-"fid8 fid6"}
mkdir -p "$OUT" "$W/json" "$W/log"
[ -x "$B/lily" ] || { echo "no $B/lily"; exit 2; }

# role groups (PrefillRunner::GemmRole names)
declare -A GROUP=(
  [proj]=gdnproj,attnproj [ba]=gdnba [out]=out [router]=router [experts]=gateup,down [shared]=shgateup,shdown
  [head]=head)
ALL=gdnproj,gdnba,attnproj,out,router,gateup,down,shgateup,shdown,head
configs=(
  "split|LILY_CUDA_PREFILL_PRECISION=split"
  "fp16|LILY_CUDA_PREFILL_PRECISION=fp16"
  "split+tc|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_GDN=tc"
  "fp16+seq|LILY_CUDA_PREFILL_PRECISION=fp16 LILY_DIAG_GDN=seq"
  "fp16+v2|LILY_CUDA_PREFILL_PRECISION=fp16 LILY_DIAG_KERNEL=v2"
  "split+v2|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_KERNEL=v2"
  "fp16+attnref|LILY_CUDA_PREFILL_PRECISION=fp16 LILY_DIAG_ATTN=simple"
)
for gname in proj ba out router experts shared head; do
  configs+=("only:$gname|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_SPLIT=${GROUP[$gname]}")
  rest=$(echo "$ALL" | tr ',' '\n' | grep -vxF -f <(echo "${GROUP[$gname]}" | tr ',' '\n') | paste -sd,)
  configs+=("allbut:$gname|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_SPLIT=$rest")
done
configs+=("only:experts+tc|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_SPLIT=gateup,down LILY_DIAG_GDN=tc")
configs+=("split+tc+wgfp16:head,router|LILY_CUDA_PREFILL_PRECISION=split LILY_DIAG_GDN=tc LILY_DIAG_SPLIT=gdnproj,gdnba,attnproj,out,gateup,down,shgateup,shdown")

run_fix() {
  local fix=$1
  if [ "${REUSE:-0}" = 1 ] && [ -f "$W/$fix/reference-mlx-4bit.safetensors" ]; then
    :
  elif ! FIXTURE_PRESETS=tools/fixtures/presets-fidelity.json FIXTURE_LAYOUTS=bf16,mlx-4bit FIXTURE_THREADS=8 \
      python3 tools/fixtures/make_fixtures.py "$W/$fix" "$fix" > "$W/log/make-$fix.log" 2>&1; then
    echo "make_fixtures.py $fix failed: $(tail -3 "$W/log/make-$fix.log")"
    return
  fi
  for layout in bf16 mlx-4bit; do
    for c in "${configs[@]}"; do
      local name=${c%%|*} envs=${c#*|}
      local tag="$fix.$layout.${name//[:+,]/_}"
      env $envs timeout 120 "$B/lily" eval --model "$W/$fix/model-$layout" \
        --ref "$W/$fix/reference-$layout.safetensors" --backend cuda --json "$W/json/$tag.json" \
        > "$W/log/$tag.log" 2>&1
    done
  done
}

start=$(date +%s)
for fix in $FIXTURES; do run_fix "$fix" & done
wait
echo "fixtures and evals: $(( $(date +%s) - start )) s"

printf '%s\n' "${configs[@]}" > "$W/configs.txt"
python3 - "$W" "$OUT" "$FIXTURES" <<'EOF'
import json, os, sys
W, OUT, fixtures = sys.argv[1:4]
configs = [l.rstrip("\n").split("|", 1) for l in open(os.path.join(W, "configs.txt"))]
cols = [(f, l) for f in fixtures.split() for l in ("bf16", "mlx-4bit")]
lines = ["top-1 / mean KL / max |dlogit| per configuration (lily eval --backend cuda)",
         f"{'config':34} " + " ".join(f"{f + ' ' + l:>28}" for f, l in cols)]
allj = {}
for name, envs in configs:
    cells = []
    for f, l in cols:
        tag = f"{f}.{l}." + name.replace(":", "_").replace("+", "_").replace(",", "_")
        p = os.path.join(W, "json", tag + ".json")
        if not os.path.exists(p):
            log = os.path.join(W, "log", tag + ".log")
            why = open(log).read().strip().splitlines()[-1:] if os.path.exists(log) else ["-"]
            cells.append(f"{'fail: ' + (why[0] if why else '?')[:22]:>28}")
            continue
        j = json.load(open(p))
        allj[tag] = j
        cells.append(f"{j['top1_agreement']:7.4f} {j['mean_kl']:10.3e} {j['max_abs_err']:8.4f}")
    lines.append(f"{name:34} " + " ".join(f"{c:>28}" for c in cells))
lines += ["", "configurations:"] + [f"  {n}: {e}" for n, e in configs]
print("\n".join(lines))
open(os.path.join(OUT, "diag.txt"), "w").write("\n".join(lines) + "\n")
json.dump(allj, open(os.path.join(OUT, "diag.json"), "w"), indent=1)
EOF
echo "total $(( $(date +%s) - start )) s"
