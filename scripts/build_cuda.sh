#!/usr/bin/env bash
# Builds the core with ggml's CUDA backend (-DGGML_CUDA=ON) against NVIDIA's CUDA toolkit from
# PyPI, on a machine that needs no GPU and no system CUDA: a compile check, and the way to get a
# CUDA build where only pip is at hand. Not part of CI.
#
#   scripts/build_cuda.sh [CUDA_ARCH] [BUILD_DIR]      (defaults: 90 = Hopper, build-cuda)
#
# The toolkit is CUDA 13's wheels, which lay out one toolkit root (nvidia/cu13/{bin,include,lib,
# nvvm}). The cu12 wheels (nvidia-cuda-nvcc-cu12 12.x) carry only ptxas, not the nvcc driver,
# so they cannot compile. The wheels are installed into $PYLLAMASPEC_CACHE/cuda-toolkit (default
# ~/.cache/pyllamaspec/cuda-toolkit), once. Where no CUDA driver library (libcuda.so) is present,
# the build is made without ggml's virtual-memory pool (GGML_CUDA_NO_VMM=ON): VMM is the one part
# that links the driver directly; a machine with a GPU has the driver and keeps it.
#
# LLAMACPP_SRC=/path/to/llama.cpp (the pinned sdist's llama.cpp/ folder) also builds its
# llama-server and llama-bench, statically, in the same tree and against the same ggml objects
# as ours: a GPU comparison whose two sides run the same kernels, for one CUDA compile instead of
# two. CMAKE_ARGS=-DPYLLAMASPEC_CPU=portable builds for a machine whose CPU differs from this one.
set -euo pipefail
arch="${1:-90}"
repo="$(cd "$(dirname "$0")/.." && pwd)"
build="${2:-$repo/build-cuda}"
cache="${PYLLAMASPEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pyllamaspec}/cuda-toolkit"
python="${PYTHON:-python3}"

pkgs=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-runtime==13.0.96
      nvidia-cublas==13.0.2.14 nvidia-cuda-cccl==13.0.85)
stamp="$cache/.installed"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "${pkgs[*]}" ]; then
    echo "build_cuda: installing the CUDA toolkit wheels into $cache" >&2
    rm -rf "$cache"
    "$python" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --target "$cache" "${pkgs[@]}"
    echo "${pkgs[*]}" > "$stamp"
fi
root="$cache/nvidia/cu13"
[ -x "$root/bin/nvcc" ] || { echo "build_cuda: no nvcc in $root/bin" >&2; exit 1; }
# The wheels ship versioned libraries only (libcudart.so.13); CMake links the unversioned names.
for lib in "$root"/lib/lib*.so.*; do
    base="${lib%%.so.*}.so"
    [ -e "$base" ] || ln -s "$(basename "$lib")" "$base"
done
[ -e "$root/lib64" ] || ln -s lib "$root/lib64"
export PATH="$root/bin:$PATH"
export LD_LIBRARY_PATH="$root/lib:$root/nvvm/lib64:${LD_LIBRARY_PATH:-}"

vmm=OFF
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so'; then
    echo "build_cuda: no CUDA driver library here: building with GGML_CUDA_NO_VMM=ON" >&2
    vmm=ON
fi
"$root/bin/nvcc" --version | tail -2
src="$repo"
targets=(pyllamaspec)
if [ -n "${LLAMACPP_SRC:-}" ]; then
    # one CMake project holding both: llama.cpp adds no ggml of its own where the target exists
    src="$build/pair"
    mkdir -p "$src"
    printf '%s\n' 'cmake_minimum_required(VERSION 3.21)' 'project(pyllamaspec_and_llamacpp C CXX)' \
        'set(BUILD_SHARED_LIBS OFF)' "add_subdirectory(\"$repo\" pyllamaspec)" \
        'foreach(o COMMON TOOLS SERVER EXAMPLES)' '    set(LLAMA_BUILD_${o} ON CACHE BOOL "" FORCE)' 'endforeach()' \
        'foreach(o TESTS APP UI)' '    set(LLAMA_BUILD_${o} OFF CACHE BOOL "" FORCE)' 'endforeach()' \
        'set(LLAMA_OPENSSL OFF CACHE BOOL "" FORCE)' "add_subdirectory(\"$LLAMACPP_SRC\" llama.cpp)" \
        > "$src/CMakeLists.txt"
    targets+=(llama-server llama-bench)
fi
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DGGML_CUDA_NO_VMM="$vmm" \
    -DCUDAToolkit_ROOT="$root" -DCMAKE_CUDA_COMPILER="$root/bin/nvcc" ${CMAKE_ARGS:-}
cmake --build "$build" --target "${targets[@]}" -j "${JOBS:-$(nproc)}"
lib="$(find "$build" -name libpyllamaspec.so -print -quit)"
echo "build_cuda: built $lib (sm_$arch); run with PYLLAMASPEC_LIBRARY=$lib" >&2
