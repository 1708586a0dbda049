#!/usr/bin/env bash
# On a machine with a GPU and a GPU build of the core (scripts/build_cuda.sh, or
# CMAKE_ARGS="-DGGML_CUDA=on" pip install .): the test suite with every layer offloaded, the
# logits against llama.cpp's reference outputs on the GPU and on the CPU, and pp64/tg64 on both.
# Not part of CI (CI has no GPU).
#
#   PYLLAMASPEC_LIBRARY=/path/to/libpyllamaspec.so scripts/gpu_check.sh [MODEL.gguf ...] [-- PYTEST ARGS]
#
# LLAMACPP_BIN=DIR (llama-bench and llama-server built with the same ggml: scripts/build_cuda.sh
# with LLAMACPP_SRC) adds llama-bench's pp64/tg64 beside ours, alternated, for each model, and
# the server comparison of issue 23 on the offline real models named by LOAD_MODELS (default
# smollm2): scripts/server_load.py --suite, every layer of target and draft offloaded, plus both
# servers at -np 8. STAGES picks and orders the stages (default "suite models load").
set -uo pipefail
cd "$(dirname "$0")/.."
models=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do models+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
bin="${LLAMACPP_BIN:-}"
python3 -c "import pyllamaspec; print(pyllamaspec.system_info())"
rc=0

suite() {
    # install, build and hub tests need the network, not a GPU. --capture=sys leaves the C
    # stderr alone: a ggml abort's message (which assertion, which CUDA error) reaches the log
    # instead of dying with the test's capture; -rfE --tb=line names each failure and its line.
    PYLLAMASPEC_TEST_GPU_LAYERS=-1 python3 -m pytest -q tests -p no:cacheprovider --capture=sys -rfE --tb=line \
        --deselect tests/project/test_install.py --deselect tests/project/test_build.py --deselect tests/files/test_offline.py "$@"
    rc=$?
}

models() {
    for m in "${models[@]}"; do
        for ngl in 0 -1; do
            echo "== $m, n_gpu_layers=$ngl"
            python3 -m pyllamaspec.bench -m "$m" -ngl "$ngl" --fidelity -p 0 -n 0
        done
        for r in 1 2; do                       # alternated: the machine's pace drifts
            python3 -m pyllamaspec.bench -m "$m" -ngl -1 -p 64 -n 64 -r 5
            [ -n "$bin" ] && "$bin/llama-bench" -m "$m" -ngl 99 -p 64 -n 64 -r 5
        done
    done
}

load() {
    [ -n "$bin" ] || { echo "gpu_check: the load stage needs LLAMACPP_BIN" >&2; return; }
    python3 scripts/server_load.py --real "${LOAD_MODELS:-smollm2}" --suite "$bin/llama-server" --ids \
        --clients 8 --requests 16 --max-tokens 64 --rounds "${LOAD_ROUNDS:-2}" --threads 4 \
        --extra="-ngl 99 -ngld 99" \
        --server "ours-np8-draft=pyllamaspec:-m {T} -md {D} -np 8 -c 4096 -t 4 -ngl 99 -ngld 99" \
        --server "llama-np8=$bin/llama-server:-m {T} -np 8 -c 4096 -t 4 -ngl 99"
}

for stage in ${STAGES:-suite models load}; do
    case "$stage" in
        suite) suite "$@" ;;
        models) models ;;
        load) load ;;
        *) echo "gpu_check: unknown stage $stage" >&2; exit 2 ;;
    esac
done
exit $rc
