#!/usr/bin/env bash
# Pack lily + lily_tests built here (sm_90) with the shared libraries the GPU image lacks (ICU, httplib, OpenSSL,
# brotli) into .devpack/devpack.tar.xz, to run on a GPU machine that lacks them.
# Usage: tools/devpack.sh BUILD_DIR    (BUILD_DIR configured with -DCMAKE_CUDA_ARCHITECTURES=90)
# On the GPU machine:  source tools/devunpack.sh BUILD_DIR   (unpacks, sets LD_LIBRARY_PATH, links the source path compiled in)
# A header edited while ninja was compiling can leave objects built from its old text that ninja counts as up to
# date (two layouts of a kernel argument struct give hung and faulting kernels): touch such headers and rebuild first.
set -euo pipefail
B=${1:?build dir}
ninja -C "$B" lily lily_tests >/dev/null
rm -rf .devpack && mkdir -p .devpack/p/lib
cp "$B/lily" "$B/lily_tests" .devpack/p/
pwd > .devpack/p/srcdir  # LILY_TEST_DIR is compiled in as an absolute path
strip .devpack/p/lily .devpack/p/lily_tests
for l in $(ldd "$B/lily" "$B/lily_tests" | awk '/=> \//{print $3}' | sort -u); do
  case "$(basename "$l")" in
    libicu*|libcpp-httplib*|libbrotli*|libssl*|libcrypto*|libz.so*|libzstd*) cp -L "$l" .devpack/p/lib/ ;;
  esac
done
XZ_OPT="-9 -T2" tar -C .devpack -cJf .devpack/devpack.tar.xz p && rm -rf .devpack/p
ls -la .devpack/devpack.tar.xz
