// Which ggml kernels multiply a loaded model's weights, by weight type (psl_model_kernels), so
// that a difference in fidelity between two machines can be traced to a path: the weights'
// buffer says whether ggml repacked them (CPU_REPACK: its gemv/gemm on interleaved blocks), put
// them in AMX tiles or on another device; for the plain CPU buffer of a CPU-only model, products
// of up to a few rows run ours (kernels/matmul_rows.h) where it takes the type; otherwise one-token
// products run ggml's vec_dot on activations quantized to the type's vec_dot type, and batched
// ones llamafile's sgemm where it has a kernel for the type on this build's instruction set, else
// vec_dot again.
// A deterministic model (psl_model_params.deterministic) runs vec_dot at every batch size.
#pragma once

#include "model.h"

#include <string>

namespace psl {

// One line per (weight type, buffer, dense or experts), e.g.
// "q4_K x168 CPU_REPACK: repacked (ggml's gemv/gemm, activations as q8_K)".
std::string describe_kernels(const psl_model & m);

}  // namespace psl
