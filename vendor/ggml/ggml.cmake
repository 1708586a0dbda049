# Brings the pinned ggml into the build as static libraries (ggml, ggml-base, ggml-cpu, ...).
# Source: -DPYLLAMASPEC_GGML_SOURCE_DIR=/path/to/ggml, else vendor/ggml/src, fetched by
# fetch.py (pinned registry file, sha256-checked, cached) when absent. fetch.py needs nothing
# but the standard library, so any Python 3.8+ runs it: inside pip's isolated build
# environment scikit-build-core hands us that environment's interpreter.

set(PYLLAMASPEC_GGML_SOURCE_DIR "" CACHE PATH "Use this ggml source tree instead of fetching the pinned one")

file(READ "${CMAKE_CURRENT_LIST_DIR}/pin.json" _pin)
string(JSON _pin_upstream GET "${_pin}" upstream)
string(JSON _pin_package GET "${_pin}" package)
string(JSON _pin_version GET "${_pin}" version)

if (PYLLAMASPEC_GGML_SOURCE_DIR)
    set(_ggml_dir "${PYLLAMASPEC_GGML_SOURCE_DIR}")
    if (NOT EXISTS "${_ggml_dir}/include/ggml.h")
        message(FATAL_ERROR "PYLLAMASPEC_GGML_SOURCE_DIR=${_ggml_dir} is not a ggml source tree (no include/ggml.h)")
    endif()
    set(PYLLAMASPEC_GGML_ORIGIN "source tree ${_ggml_dir}")
else()
    find_package(Python 3.8 COMPONENTS Interpreter REQUIRED)
    execute_process(
        COMMAND "${Python_EXECUTABLE}" "${CMAKE_CURRENT_LIST_DIR}/fetch.py" "${CMAKE_CURRENT_LIST_DIR}/src"
        RESULT_VARIABLE _fetch_rc
        OUTPUT_VARIABLE _fetch_out
        OUTPUT_STRIP_TRAILING_WHITESPACE)
    if (NOT _fetch_rc EQUAL 0)
        message(FATAL_ERROR "pyllamaspec: could not obtain the pinned ggml source (see the message above). "
                            "For an offline build pass -DPYLLAMASPEC_GGML_SOURCE_DIR=/path/to/ggml.")
    endif()
    set(_ggml_dir "${_fetch_out}")
    set(PYLLAMASPEC_GGML_ORIGIN "${_pin_package} ${_pin_version}: ${_pin_upstream}")
endif()
message(STATUS "pyllamaspec: ggml from ${_ggml_dir} (${PYLLAMASPEC_GGML_ORIGIN})")

# ggml is linked statically into our one shared library.
set(BUILD_SHARED_LIBS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
set(GGML_BUILD_TESTS OFF CACHE BOOL "" FORCE)
set(GGML_BUILD_EXAMPLES OFF CACHE BOOL "" FORCE)
set(GGML_BACKEND_DL OFF CACHE BOOL "" FORCE)
# llama.cpp turns on the llamafile sgemm kernels (faster prompt processing); so do we.
set(GGML_LLAMAFILE ON CACHE BOOL "")
# ...and CUDA graphs ("llama.cpp only" in ggml: off by default there). Our contexts reuse their
# graph between evals as llama.cpp's do, which is what replaying a captured CUDA graph needs:
# measured on an H100, SmolLM2 Q4_1 tg64 488 -> 901 t/s (llama-bench b11434: 890).
set(GGML_CUDA_GRAPHS_DEFAULT ON)
# ggml's RPC backend (a target's layers on other machines, psl_rpc_* / pyllamaspec.rpc_server).
# Its client and server are plain sockets, no extra dependency: on unless turned off.
set(GGML_RPC ON CACHE BOOL "")
include("${CMAKE_CURRENT_LIST_DIR}/cpu_variant.cmake")

add_subdirectory("${_ggml_dir}" "${CMAKE_BINARY_DIR}/ggml" EXCLUDE_FROM_ALL)

# GCC drops ggml's AMX tile configuration at -O3 (csrc/compat/gcc_amx_tilecfg.h says how): its
# AMX kernels get a _tile_loadconfig that reads the whole configuration.
if (CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND TARGET ggml-cpu)
    set_source_files_properties("${_ggml_dir}/src/ggml-cpu/amx/mmq.cpp" TARGET_DIRECTORY ggml-cpu
        PROPERTIES COMPILE_OPTIONS "-include;${PROJECT_SOURCE_DIR}/csrc/compat/gcc_amx_tilecfg.h")
endif()
