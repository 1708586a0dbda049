// The product of a weight matrix and a few activation rows (a verification's k+1 tokens) on the
// CPU, as a custom ggml node. ggml's CPU backend multiplies them one weight row and one activation
// row at a time (vec_dot) or through llamafile's tiles, decoding every weight block again for each
// activation row. This kernel decodes a weight block once and multiplies it into every row,
// whose accumulators stay in registers, and keeps vec_dot's arithmetic per row: the activations
// quantized by ggml's own from_float, the same integer sums, the block scales and the lanes added
// in vec_dot's order. A row's result is therefore ggml's one-token result, bit for bit, whatever
// rows share the call (batch-invariant). On AVX-512 builds (F, BW, VL; VNNI's dpbusd where the CPU
// has it) Q8_0, Q5_0, Q4_0, Q4_1, Q4_K, Q5_K and Q6_K take two weight rows at once in 512-bit registers, each
// half doing its row's 8-lane vec_dot arithmetic, and F16 (up to 3 rows) two weight rows with each
// activation register loaded once for both: the same numbers (PYLLAMASPEC_MATMUL_ROWS=avx2
// brings back the row-at-a-time loops, to compare); the two rows are half a thread's share apart,
// two streams the hardware prefetcher follows (adjacent rows' interleaved loads it does not).
#pragma once

#include "ggml.h"

#include <unordered_map>

namespace psl {

// Whether matmul_rows takes the product w x (a GGML_OP_MUL_MAT's operands): a 2-D weight of a
// type it has a kernel for on this build (Q4_K, Q5_K, Q6_K, Q8_0, Q5_0, Q4_0, Q4_1, F16 on x86 with AVX2,
// FMA and F16C: the AVX2 loops of ggml's vec_dot, which its AVX-512 builds run too; Q8_0, Q4_1,
// Q4_K, Q6_K on aarch64 with dotprod: ggml's one-row NEON vec_dot, matmul_rows_neon.h) in the CPU's
// plain buffer (not repacked, not AMX: a CPU-only model keeps F16 out of ggml's AMX buffer, which
// has no tile kernel for it), F32 activations of 1..matmul_rows_max(type) rows. One row too: a
// token of plain decoding, where ours streams the weights faster than ggml's vec_dot loop (two
// rows a thread, prefetched: Zen 4, docs/benchmarks.md), with the same numbers. Off with
// PYLLAMASPEC_MATMUL_ROWS=ggml (read when a model is loaded, which then keeps no plain copy of
// its repacked weights, and when a graph is built), to compare with ggml's.
bool matmul_rows_fit(const ggml_tensor * w, const ggml_tensor * x);

// Whether matmul_rows takes weights of type t on this build: false where it has no kernel for t
// or is off.
bool matmul_rows_takes(ggml_type t);

// The most activation rows it takes for weights of type t (0: none). F16 stops at 4: from 8 rows
// llamafile's tiles, which share each load between several rows and columns, are faster (measured
// on a Zen 3 core, Gemma 3's F16 head: 84 ms at 8 rows against 146 for ours, 70 against 63 at 4;
// on Zen 4, tiles of 3 weight rows x 8 activation rows summing vec_dot's four accumulators one
// after another were no faster than llamafile's at 6-8 rows and slower at 16: docs/benchmarks.md).
// Q5_K stops at 8: from 9 rows ggml's tiled vec_dot is faster (a 290 MB Q5_K model, n_embd 2048,
// Zen 4, 2 threads, fastest of 15: 8 / 12 / 16 rows ours 53 / 72 / 93 ms, ggml's 56 / 59 / 54).
int64_t matmul_rows_max(ggml_type t);

constexpr int64_t MATMUL_ROWS_MAX = 16;

// Whether a weight of type t that ggml repacked gets a plain twin for ours (matmul_rows_adopt):
// the types ours takes, but Q4_0, whose repacked gemv / gemm is faster than ours at 1-16 rows
// (SmolLM2 as Q4_0, one thread's CPU ms at 1 / 4 / 16 rows: 6.8 / 13.1 / 43 ours, 5.3 / 9.9 /
// 28.5 repacked; on plain weights ours is the faster: 6.8 / 13.0 / 41.4 against vec_dot's and
// llamafile's 7.3 / 20.6 / 61). Repacked Q4_0 is therefore not batch-invariant (ggml's gemv and
// gemm sum differently), as before. On ARM none does: ggml's repacked NEON kernels against ours
// are unmeasured on ARM hardware.
bool matmul_rows_twins(ggml_type t);

// Whether the weights in ggml's AMX buffer get a plain twin too, which ours reads for 1-16 rows
// (AMX tiles for 17+): PYLLAMASPEC_MATMUL_ROWS_AMX=1, read when a model is loaded. Off by default:
// AMX's one-token product is faster than ours here (docs/benchmarks.md).
bool matmul_rows_on_amx();

// Turns the graph's products that matmul_rows_fit takes into matmul_rows nodes, in place (the
// node keeps its activations, shape and identity; its op becomes our custom one). A weight that
// ggml repacked is read through its plain twin (a tensor on the same values in the plain layout),
// where `plain` holds one. ctx: the graph's context (a scratch node is made there to copy the op
// from). Returns how many it turned.
int matmul_rows_adopt(ggml_context * ctx, ggml_cgraph * gf,
                      const std::unordered_map<const ggml_tensor *, ggml_tensor *> & plain);

}  // namespace psl
