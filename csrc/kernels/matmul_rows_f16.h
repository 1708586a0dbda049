// matmul_rows' F16 kernels (matmul_rows.h): one F16 weight row times R activation rows, each row's
// sum ggml_vec_dot_f16's (kern::dot's order). Included by kernels/*.cpp only (their instruction sets).
#pragma once

#include "kernels/simd.h"

#include <cstdint>

namespace psl::kern {

// The most rows one call takes: four accumulators a row in registers with the weights' four
// (AVX-512's 32 registers: 4 rows, as many as matmul_rows takes for F16; AVX2's 16: 2).
constexpr int F16_ROWS_MAX = Vec::N >= 16 ? 4 : 2;

// Two weight rows at once take at most this many activation rows (AVX-512 only: 8 accumulators a
// row). From 4 rows one weight row at a time was faster (Zen 4, docs/benchmarks.md).
constexpr int F16_PAIR_ROWS_MAX = 3;

// y: R rows of k values (the activations rounded to F16), one after another; res: R sums.
// Defined for R = 1..F16_ROWS_MAX on x86 with AVX2, FMA and F16C.
template <int R>
void f16_rows(const ggml_fp16_t * w, const float * y, int64_t k, float * res);

// f16_rows for two weight rows w0, w1 (res0, res1: their R sums each, the same numbers as
// f16_rows'). Defined for R = 1..F16_PAIR_ROWS_MAX on AVX-512 builds.
template <int R>
void f16_pairs(const ggml_fp16_t * w0, const ggml_fp16_t * w1, const float * y, int64_t k, float * res0,
               float * res1);

}  // namespace psl::kern
