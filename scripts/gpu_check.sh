#!/usr/bin/env bash
# On a machine with a GPU and a GPU build of the core (scripts/build_cuda.sh, or
# CMAKE_ARGS="-DGGML_CUDA=on" pip install .): the test suite with every layer offloaded, the
# logits against llama.cpp's reference outputs on the GPU and on the CPU, and pp64/tg64 on both.
# Not part of CI (CI has no GPU).
#
#   PYLLAMASPEC_LIBRARY=/path/to/libpyllamaspec.so scripts/gpu_check.sh [MODEL.gguf ...] [-- PYTEST ARGS]
set -uo pipefail
cd "$(dirname "$0")/.."
models=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -c "import pyllamaspec; print(pyllamaspec.system_info())"
# the suite, offloaded; install, build and hub tests need the network, not a GPU
PYLLAMASPEC_TEST_GPU_LAYERS=-1 python3 -m pytest -q tests -p no:cacheprovider \
    --deselect tests/test_install.py --deselect tests/test_build.py --deselect tests/test_offline.py "$@"
rc=$?
for m in "${models[@]}"; do
    for ngl in 0 -1; do
        echo "== $m, n_gpu_layers=$ngl"
        python3 -m pyllamaspec.bench -m "$m" -ngl "$ngl" --fidelity -p 0 -n 0
        python3 -m pyllamaspec.bench -m "$m" -ngl "$ngl" -p 64 -n 64 -r 5
    done
done
exit $rc
