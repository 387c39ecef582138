# Sourced on a GPU machine (see tools/devpack.sh): unpacks .devpack/devpack.tar.xz into BUILD_DIR.
B=${1:-build-dev}
mkdir -p /tmp/p "$B" && tar -C /tmp -xJf .devpack/devpack.tar.xz && cp /tmp/p/lily /tmp/p/lily_tests "$B/"
export LD_LIBRARY_PATH=/tmp/p/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
SRC=$(cat /tmp/p/srcdir); [ "$SRC" = "$PWD" ] || { mkdir -p "$(dirname "$SRC")" && ln -sfn "$PWD" "$SRC"; }
