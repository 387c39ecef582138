#!/bin/bash
# Device run of the prefill work (tests + bench); results in $OUT.
cd "$(dirname "$0")"
R=$PWD
mkdir -p /work/wt && ln -sfn "$R" /work/wt/cudaprefill
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > "$OUT/gpu.txt" 2>&1
if ! ./bin/lily_tests --gtest_list_tests > /dev/null 2>&1; then
  echo "prebuilt binaries do not run here: building" > "$OUT/build.txt"
  (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build -j16) >> "$OUT/build.txt" 2>&1
  mkdir -p bin && cp build/lily build/lily_tests bin/
fi
timeout "${TEST_S:-150}" ./bin/lily_tests --gtest_filter="${FILTER:-*Prefill*:CudaTiny*}" > "$OUT/tests.txt" 2>&1
echo "rc=$?" >> "$OUT/tests.txt"
timeout "${BENCH_S:-300}" ./bin/lily bench --backend cuda --synthetic qwen3.6-35b-a3b \
  --prefill-lengths "${LENS:-256,1024,4096,16384,65536,131072}" --decode-contexts 256 --prefill-chunk 2048 --reps 1 \
  > "$OUT/bench.txt" 2>&1
echo "rc=$?" >> "$OUT/bench.txt"
