#!/usr/bin/env bash
# Builds the core and ggml with AddressSanitizer + UndefinedBehaviorSanitizer, runs pytest on the
# given test files against that library, counts the sanitizer reports, and fails on any report or
# test failure.
#
#   scripts/sanitize.sh [--build DIR] [--build-only] [--leaks] [pytest args / test files ...]
#
# DIR defaults to build-asan in the repository; the tests default to the fast ones that reach
# the core most (see DEFAULT_TESTS), and arguments that name no test path are pytest options
# added to those (e.g. --durations=10). ggml comes from $PYLLAMASPEC_GGML_SOURCE_DIR when set, else
# vendor/ggml/src (fetched there by the build when absent). Needs GCC (its libasan/libubsan).
#
# What it takes to run a sanitized library inside an uninstrumented Python (found by trying):
# * LD_PRELOAD="$(g++ -print-file-name=libasan.so) $(g++ -print-file-name=libstdc++.so)": ASan's
#   runtime must be the first library in the process, or it refuses to start ("ASan runtime does
#   not come first"); libstdc++ must be there before ASan initialises, or its __cxa_throw
#   interceptor finds no real __cxa_throw and the first C++ exception the core throws dies in
#   a CHECK.
# * libubsan is linked into the library (-static-libubsan), not loaded beside libasan: as a
#   shared library its calls to __sanitizer_set_report_path bind to libasan's copy, so its own
#   report file stays stderr whatever log_path says (GCC 12), and reports written to the stderr
#   of a test's subprocess are lost. Linked in, its symbols are hidden (--exclude-libs,ALL) and
#   log_path works.
# * cffi's dlopen of the sanitized library then just works (PYLLAMASPEC_LIBRARY points at it).
# * PYTHONMALLOC=malloc: Python's buffers come from malloc, so ASan sees an overrun of a buffer
#   that Python handed to the core (pymalloc's arenas would hide it).
# * ASAN_OPTIONS=detect_leaks=0 by default: CPython does not free its own objects at exit, and
#   LeakSanitizer would report thousands of them. --leaks turns it on and counts only the leak
#   reports whose allocation stack passes through libpyllamaspec (the rest are CPython's).
# * UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=0 with -fsanitize-recover=undefined: every
#   report is printed with its stack and the run goes on, so reports are counted, not just the
#   first. Both sanitizers write per-pid log files (log_path) under DIR/sanitizer-logs; the
#   counts at the end come from there (child processes that tests start are counted too).
#   scripts/ubsan.supp lists the reports in third-party code we cannot change, each with why.
# * Subprocesses inherit all of this, so tests that run `python -c ...` are sanitized too.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO="$PWD"

BUILD="$REPO/build-asan"
BUILD_ONLY=0
LEAKS=0
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --build) BUILD="$(realpath -m "$2")"; shift 2 ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --leaks) LEAKS=1; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) ARGS+=("$1"); shift ;;
    esac
done

# The fast files that exercise the core: loading (corrupt files included), the header check,
# tokenizer, threads, a token tree's acceptance on hand-made rows (bad trees included), and a
# short fuzz run (sanitized too: scripts/fuzz.py sees the library).
# Deselected, as they measure what ASan changes, not what it checks:
# * test_tokenizer_scaling's time-against-size tests: speed ratios, meaningless under ASan's
#   constant factors (and on a shared machine);
# * test_reliability's failed-loads-leak-nothing tests: resident memory, which ASan's quarantine
#   of freed blocks (256 MiB) keeps up; --leaks has LeakSanitizer check every allocation of the
#   core instead (failed loads included: test_core and test_gguf_check make hundreds);
# * test_tokenizing_alongside_an_eval: waits 60 s for a 1500-token eval, which takes longer here.
DEFAULT_TESTS=(tests/engine/test_core.py tests/files/test_gguf_check.py tests/engine/test_tokenizer.py
               tests/engine/test_tokenizer_round_trip.py tests/engine/test_tokenizer_oracles.py
               tests/engine/test_reliability.py tests/engine/test_tokenizer_scaling.py tests/project/test_fuzz.py
               tests/engine/test_sampler_tree.py -k "not time_grows_linearly"
               --deselect tests/engine/test_reliability.py::test_failed_loads_leak_nothing
               --deselect tests/engine/test_reliability.py::test_failed_loads_of_a_truncated_real_model_leak_nothing
               --deselect tests/engine/test_reliability.py::test_failed_split_loads_leak_nothing
               --deselect tests/engine/test_reliability.py::test_tokenizing_alongside_an_eval)
# Arguments that name no test file or directory are pytest options added to the default files.
NAMED=0
for a in ${ARGS[@]+"${ARGS[@]}"}; do [ -e "${a%%::*}" ] && NAMED=1; done
[ "$NAMED" = 1 ] || ARGS=("${DEFAULT_TESTS[@]}" ${ARGS[@]+"${ARGS[@]}"})

CXX="${CXX:-g++}"
SAN="-fsanitize=address,undefined -fsanitize-recover=undefined -fno-omit-frame-pointer -g"
GGML_DIR_ARG=()
[ -z "${PYLLAMASPEC_GGML_SOURCE_DIR:-}" ] || GGML_DIR_ARG=(-DPYLLAMASPEC_GGML_SOURCE_DIR="$PYLLAMASPEC_GGML_SOURCE_DIR")
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

mkdir -p "$BUILD"
# RelWithDebInfo: optimised like the shipped build (and NDEBUG like it), with line numbers.
cmake -S "$REPO" -B "$BUILD" ${GEN[@]+"${GEN[@]}"} -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER="${CC:-gcc}" -DCMAKE_CXX_COMPILER="$CXX" \
    -DCMAKE_C_FLAGS="$SAN" -DCMAKE_CXX_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined -static-libubsan" \
    ${GGML_DIR_ARG[@]+"${GGML_DIR_ARG[@]}"} >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
cmake --build "$BUILD" -j "${JOBS:-2}" --target pyllamaspec
LIB="$BUILD/libpyllamaspec.so"
echo "sanitized library: $LIB"
[ "$BUILD_ONLY" = 0 ] || exit 0

LOGS="$BUILD/sanitizer-logs"
rm -rf "$LOGS"
mkdir -p "$LOGS"
export PYLLAMASPEC_LIBRARY="$LIB"
export LD_PRELOAD="$("$CXX" -print-file-name=libasan.so) $("$CXX" -print-file-name=libstdc++.so)"
export PYTHONMALLOC=malloc
export ASAN_OPTIONS="detect_leaks=$LEAKS:log_path=$LOGS/asan:abort_on_error=0:symbolize=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=0:report_error_type=1:log_path=$LOGS/ubsan:suppressions=$REPO/scripts/ubsan.supp"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

set +e
python -m pytest -q -p no:cacheprovider "${ARGS[@]}"
TESTS_RC=$?
set -e
unset LD_PRELOAD

python "$REPO/scripts/sanitizer_logs.py" "$LOGS" --tests-rc "$TESTS_RC"
