#!/usr/bin/env bash
# Cross-builds ggml (ggml-base + ggml-cpu, vendored source) for aarch64 and the NEON matmul_rows
# kernels' exactness check (tests/native/neon_check.cpp), and runs it under qemu: each kernel row
# must equal ggml's one-row vec_dot bit for bit. Installs nothing; needs aarch64-linux-gnu-g++ and
# qemu-aarch64 (Debian: g++-aarch64-linux-gnu qemu-user). Exits nonzero on any mismatch.
#   scripts/neon_check.sh [build-dir]
# ARCH (default armv8.2-a+dotprod+fp16, Apple M1's level; +i8mm for M2's), QEMU_CPU (default max),
# GGML_SRC (default vendor/ggml/src, which vendor/ggml/fetch.py fetches).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
arch=${ARCH:-armv8.2-a+dotprod+fp16}
src=${GGML_SRC:-$root/vendor/ggml/src}
out=${1:-$(mktemp -d /tmp/neon_check.XXXXXX)}
jobs=${JOBS:-2}
[ -f "$src/CMakeLists.txt" ] || { echo "no ggml source at $src (set GGML_SRC)" >&2; exit 2; }
mkdir -p "$out"
# the vendored tree is trimmed of ggml.pc.in, which ggml's CMakeLists configures: build a copy
if [ ! -f "$out/gsrc/CMakeLists.txt" ]; then
    cp -r "$src" "$out/gsrc"
    touch "$out/gsrc/ggml.pc.in"
fi
b="$out/ggml-${arch//+/_}"
cmake -S "$out/gsrc" -B "$b" -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$arch" -DGGML_OPENMP=OFF \
    -DBUILD_SHARED_LIBS=OFF -DGGML_BUILD_TESTS=OFF -DGGML_BUILD_EXAMPLES=OFF > "$b.cfg.log"
cmake --build "$b" --target ggml-cpu -j"$jobs" > "$b.build.log"
# the kernels get ggml-cpu's own flags (-O3, -march), so the compiler contracts multiply-adds alike
aarch64-linux-gnu-g++ -std=c++17 -O3 -DNDEBUG -march="$arch" -static \
    -I"$root/csrc/kernels" -I"$out/gsrc/include" \
    "$root/tests/native/neon_check.cpp" "$root/csrc/kernels/matmul_rows_neon.cpp" \
    "$b/src/libggml-cpu.a" "$b/src/libggml-base.a" -lpthread -lm -o "$b/neon_check"
qemu-aarch64 -cpu "${QEMU_CPU:-max}" "$b/neon_check"
