#!/usr/bin/env bash
# Installs every build and test dependency from Debian packages (and the npm test clients), then configures
# and builds lily into build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
PKGS="build-essential cmake ninja-build pkg-config libgtest-dev nlohmann-json3-dev libcpp-httplib-dev libicu-dev python3 python3-jinja2 curl chromium"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$(nproc)"
