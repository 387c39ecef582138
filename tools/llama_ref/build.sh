#!/usr/bin/env bash
# Builds what the GGUF cross-check needs from a llama.cpp source tree, CPU only: libllama and llama_ref (this
# directory's program: logits and tokenisation dumps, and quantisation through libllama's llama_model_quantize,
# the function llama-quantize calls).
#   tools/llama_ref/build.sh LLAMA_SRC BUILD_DIR      (JOBS=N sets the parallel jobs, default 2)
# Result: BUILD_DIR/llama_ref/llama_ref.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 LLAMA_SRC BUILD_DIR" >&2; exit 2; }
src=$(realpath "$1")
build=$(realpath -m "$2")
here=$(dirname "$(realpath "$0")")
[ -f "$src/src/models/qwen35moe.cpp" ] || { echo "$src: not a llama.cpp tree with the qwen35moe model" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF "${launcher[@]}" >/dev/null
nice ninja -C "$build" -j"${JOBS:-2}" llama
cmake -S "$here" -B "$build/llama_ref" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_SRC="$src" \
  -DLLAMA_BUILD_DIR="$build" >/dev/null
nice ninja -C "$build/llama_ref"
echo "built $build/llama_ref/llama_ref"
