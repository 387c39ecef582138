#!/usr/bin/env bash
# Sets up (scripts/setup.sh), builds, and runs every test: C++ unit/model tests through CTest, then the
# JavaScript client tests (the real `openai` and `@anthropic-ai/sdk` npm clients, and the chat page in headless
# Chromium, against a real `lily serve`) when present.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/fetch-test-data.sh
(cd build && ctest --output-on-failure -j"$(nproc)")
if [ -f tests/js/package.json ]; then
  (cd tests/js && npm install --no-audit --no-fund --silent && LILY_BIN="$PWD/../../build/lily" npm test)
fi
