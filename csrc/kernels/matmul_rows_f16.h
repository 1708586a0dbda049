// matmul_rows' F16 kernels (matmul_rows.h): one F16 weight row times R activation rows, each row's
// sum ggml_vec_dot_f16's (kern::dot's order). Included by kernels/*.cpp only (their instruction sets).
#pragma once

#include "kernels/simd.h"

#include <cstdint>

namespace psl::kern {

// The most rows one call takes: four accumulators a row in registers with the weights' four
// (AVX-512's 32 registers: 4 rows, as many as matmul_rows takes for F16; AVX2's 16: 2).
constexpr int F16_ROWS_MAX = Vec::N >= 16 ? 4 : 2;

// y: R rows of k values (the activations rounded to F16), one after another; res: R sums.
// Defined for R = 1..F16_ROWS_MAX on x86 with AVX2, FMA and F16C.
template <int R>
void f16_rows(const ggml_fp16_t * w, const float * y, int64_t k, float * res);

}  // namespace psl::kern
