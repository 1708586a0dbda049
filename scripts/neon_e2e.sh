#!/usr/bin/env bash
# End-to-end check of the NEON matmul_rows kernels: cross-builds the whole core (libpyllamaspec and
# its ggml) for aarch64 with dotprod, a C driver on the public header (tests/native/neon_e2e.c),
# writes tiny seeded GGUFs on the host (scripts/neon_e2e_models.py: Q8_0, Q4_1, Q4_K + Q6_K) and
# runs the driver on each under qemu: batched rows must equal the rows evaluated one token at a
# time, bit for bit; a deterministic model's rows ours must equal ggml's, bit for bit; ours' rows
# are compared with ggml's batched ones (PYLLAMASPEC_MATMUL_ROWS=ggml; max abs difference). Installs
# nothing; needs aarch64-linux-gnu-g++, qemu-aarch64 (Debian: g++-aarch64-linux-gnu qemu-user),
# cmake, ninja, and a Python with the test requirements (gguf, numpy). Exits nonzero on a failure.
#   scripts/neon_e2e.sh [build-dir]
# ARCH (default armv8.2-a+dotprod+fp16, Apple M1's level; with +i8mm, M2's, ggml's deterministic
# rows pair through smmla at even row counts, so ours must equal them at odd ones only: the driver
# says which), QEMU_CPU (default max), GGML_SRC (default
# vendor/ggml/src, which vendor/ggml/fetch.py fetches), PYTHON (default .venv/bin/python), JOBS (2).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
arch=${ARCH:-armv8.2-a+dotprod+fp16}
src=${GGML_SRC:-$root/vendor/ggml/src}
py=${PYTHON:-$root/.venv/bin/python}
out=${1:-$(mktemp -d /tmp/neon_e2e.XXXXXX)}
jobs=${JOBS:-2}
[ -f "$src/CMakeLists.txt" ] || { echo "no ggml source at $src (set GGML_SRC)" >&2; exit 2; }
mkdir -p "$out"
b="$out/core-${arch//+/_}"
# portable: no -mcpu=native (the host's); GGML_CPU_ARM_ARCH gives ggml and our kernels the target
cmake -S "$root" -B "$b" -G Ninja -DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64 \
    -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++ \
    -DCMAKE_BUILD_TYPE=Release -DPYLLAMASPEC_CPU=portable -DGGML_CPU_ARM_ARCH="$arch" \
    -DPYLLAMASPEC_GGML_SOURCE_DIR="$src" > "$b.cfg.log"
nice cmake --build "$b" --target pyllamaspec -j"$jobs" > "$b.build.log"
aarch64-linux-gnu-gcc -std=c11 -O2 -Wall -I"$root/csrc/include" "$root/tests/native/neon_e2e.c" \
    -L"$b" -lpyllamaspec -Wl,-rpath,"$b" -lm -o "$b/neon_e2e"
"$py" "$root/scripts/neon_e2e_models.py" "$out/models" > "$out/models.txt"
fail=0
while read -r model; do
    qemu-aarch64 -cpu "${QEMU_CPU:-max}" -L /usr/aarch64-linux-gnu "$b/neon_e2e" "$model" || fail=1
done < "$out/models.txt"
[ "$fail" = 0 ] && echo "neon_e2e: all passed" || { echo "neon_e2e: FAILED"; exit 1; }
