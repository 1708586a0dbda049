// NEON (aarch64 with dotprod, Apple Silicon's level) kernels for matmul_rows: R activation rows
// (1..8) times one weight row, the weight block loaded and unpacked once for all R rows, and each
// row's arithmetic that of ggml's one-row (nrc == 1) NEON vec_dot for the type, so each res[r]
// equals ggml's vec_dot on row r bit for bit. y[r]: row r in the vec_dot type's blocks exactly as
// ggml's from_float writes them (Q8_0 for Q8_0, Q8_1 for Q4_1, Q8_K for Q4_K and Q6_K); k: the row length (a
// multiple of 32; of 256 for the K types). Checked against ggml under qemu by scripts/neon_check.sh.
// Self-contained (no ggml header): matmul_rows_arm.cpp wires them into the node.
#pragma once

#include <cstdint>

#if defined(__ARM_NEON) && defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#define PSL_ROWS_NEON 1

namespace psl::neon {

template <int R> void q8_0_rows(const void * w_row, const void * const * y, int64_t k, float * res);
template <int R> void q4_1_rows(const void * w_row, const void * const * y, int64_t k, float * res);
template <int R> void q4_K_rows(const void * w_row, const void * const * y, int64_t k, float * res);
template <int R> void q6_K_rows(const void * w_row, const void * const * y, int64_t k, float * res);

}  // namespace psl::neon

#endif
