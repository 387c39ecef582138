#!/usr/bin/env bash
# Fuzzes what a request body reaches before the model (tests/fuzz/fuzz_request.cpp): the JSON gate,
# request validation, special-token masking, the chat template's value conversion and rendering.
# Builds the libFuzzer target with clang (-fsanitize=fuzzer,address,undefined) into build-fuzz/ and runs it
# for a bounded time on the seed corpus tests/fuzz/corpus (new inputs go to build-fuzz/corpus).
#   scripts/fuzz.sh [SECONDS]     (default 60; FUZZ_SECONDS works too; FUZZ_JOBS=N runs N workers)
# Exit status 0: no crash in that time; otherwise the crashing input is saved as build-fuzz/crash-*.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-${FUZZ_SECONDS:-60}}
out=${FUZZ_BUILD:-build-fuzz}
cxx=${CLANGXX:-clang++}
command -v "$cxx" >/dev/null || { echo "fuzz.sh: $cxx not found (Debian: apt-get install clang)" >&2; exit 2; }
mkdir -p "$out/obj" "$out/corpus"
srcs=(src/server/json_limits.cpp src/server/request_parse.cpp src/server/literal_text.cpp src/chat/template.cpp
      src/io/text_file.cpp src/chat/jinja/*.cpp)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -Isrc
       "-DLILY_SOURCE_DIR=\"$PWD\"")
objs=()
for s in "${srcs[@]}" tests/fuzz/fuzz_request.cpp; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$s" -nt "$o" ] || [ -n "$(find src -name '*.h' -newer "$o" -print -quit)" ]; then
    "$cxx" "${flags[@]}" -c "$s" -o "$o" &
  fi
  objs+=("$o")
  while [ "$(jobs -rp | wc -l)" -ge "${FUZZ_BUILD_JOBS:-2}" ]; do wait -n; done
done
wait
"$cxx" -fsanitize=fuzzer,address,undefined "${objs[@]}" -o "$out/fuzz_request" -licuuc -licui18n
echo "fuzz.sh: running $out/fuzz_request for ${secs}s"
par=()
if [ "${FUZZ_JOBS:-1}" -gt 1 ]; then par=(-fork="$FUZZ_JOBS"); fi
"$out/fuzz_request" -max_total_time="$secs" -max_len=16384 -rss_limit_mb=2048 -timeout=10 "${par[@]}" \
  -artifact_prefix="$out/" -print_final_stats=1 "$out/corpus" tests/fuzz/corpus
