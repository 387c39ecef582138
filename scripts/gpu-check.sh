#!/usr/bin/env bash
# One command for a GPU machine: every CUDA test, the `small` fixture (real head sizes) made with transformers
# and compared through `lily eval` on CUDA and the CPU reference, `lily run`/`lily serve` on CUDA end to end,
# and the full benchmark on the synthetic full-size model. Usage: scripts/gpu-check.sh BUILD_DIR OUT_DIR
# (BUILD_DIR holds lily and lily_tests built with CUDA; OUT_DIR receives the logs, bench JSON and plot).
set -uo pipefail
B=${1:-build}
OUT=${2:-gpu-out}
mkdir -p "$OUT"
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
echo "== CUDA tests"
timeout 240 "$B/lily_tests" --gtest_filter='*Cuda*:*Prefill*' > "$OUT/cuda_tests.log" 2>&1
echo "exit $?"; grep -E "^\[  (PASSED|FAILED) |tests ran" "$OUT/cuda_tests.log"
echo "== small fixture (transformers reference)"
if timeout 240 python3 tools/fixtures/make_fixtures.py /tmp/lily-small small > "$OUT/small_fixture.log" 2>&1; then
  for layout in bf16 mlx-4bit; do
    for be in cuda cpu-ref; do
      echo "-- $layout $be"
      "$B/lily" eval --model /tmp/lily-small/model-$layout --ref /tmp/lily-small/reference-$layout.safetensors \
        --backend $be 2>&1 | tail -6
    done
    echo "-- $layout cuda, split-precision prefill (LILY_CUDA_PREFILL_PRECISION=split)"
    LILY_CUDA_PREFILL_PRECISION=split "$B/lily" eval --model /tmp/lily-small/model-$layout \
      --ref /tmp/lily-small/reference-$layout.safetensors --backend cuda 2>&1 | tail -6
    echo "-- $layout cuda, decode path (LILY_CUDA_PREFILL=decode)"
    LILY_CUDA_PREFILL=decode "$B/lily" eval --model /tmp/lily-small/model-$layout \
      --ref /tmp/lily-small/reference-$layout.safetensors --backend cuda 2>&1 | tail -6
    echo "-- $layout cuda, decode path, the router's own rows (LILY_CUDA_PREFILL=decode LILY_CUDA_ROUTER_Y=0)"
    LILY_CUDA_PREFILL=decode LILY_CUDA_ROUTER_Y=0 "$B/lily" eval --model /tmp/lily-small/model-$layout \
      --ref /tmp/lily-small/reference-$layout.safetensors --backend cuda 2>&1 | tail -6
    echo "-- $layout cuda, decode path, f32 activations (LILY_CUDA_PREFILL=decode LILY_CUDA_INT8_X=0)"
    LILY_CUDA_PREFILL=decode LILY_CUDA_INT8_X=0 "$B/lily" eval --model /tmp/lily-small/model-$layout \
      --ref /tmp/lily-small/reference-$layout.safetensors --backend cuda 2>&1 | tail -6
    echo "-- $layout cuda, reference prefill kernels (LILY_CUDA_PREFILL=simple)"
    LILY_CUDA_PREFILL=simple "$B/lily" eval --model /tmp/lily-small/model-$layout \
      --ref /tmp/lily-small/reference-$layout.safetensors --backend cuda 2>&1 | tail -6
  done
else
  echo "make_fixtures.py failed (see small_fixture.log)"; tail -5 "$OUT/small_fixture.log"
fi | tee "$OUT/small_eval.txt"
echo "== run / serve on CUDA (demo model)"
timeout 60 "$B/lily" run --backend cuda --chat --prompt "Hello" --max-tokens 16 2>&1 | tail -2
port=18089
"$B/lily" serve --backend cuda --port $port > "$OUT/serve.log" 2>&1 &
spid=$!
for _ in $(seq 50); do curl -sf localhost:$port/health > /dev/null && break; sleep 0.2; done
curl -s localhost:$port/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"tiny-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":8}' | head -c 600; echo
kill $spid; wait $spid 2>/dev/null
echo "== bench"
timeout "${BENCH_TIMEOUT:-330}" "$B/lily" bench --backend cuda --synthetic qwen3.6-35b-a3b --limits \
  --reps "${BENCH_REPS:-2}" --json "$OUT/bench-cuda.json" --plot "$OUT/bench-cuda.svg" 2>&1 | tee "$OUT/bench.txt" | tail -30
echo "== sampled decode (device and host sampler) at 4K"
timeout 300 "$B/lily" bench --backend cuda --synthetic qwen3.6-35b-a3b --prefill-lengths 256 --decode-contexts 4K \
  --decode-context unfilled --decode-steps 256 --reps 1 --sampled 2>&1 | tee "$OUT/bench-sampled.txt" | tail -4
echo "== router logits from y: A/B of LILY_CUDA_ROUTER_Y=0|1, same binary, alternated twice (RY_AB=0 skips)"
if [ "${RY_AB:-1}" = 1 ]; then
  ROUNDS=2 timeout 600 scripts/ab-switch.sh "$B/lily" LILY_CUDA_ROUTER_Y "0 1" --synthetic qwen3.6-35b-a3b \
    --backend cuda --prefill-lengths 256 --decode-contexts 256,4K --decode-context unfilled --decode-steps 256 \
    --reps 1 | tee "$OUT/router_y_ab.txt"
fi
