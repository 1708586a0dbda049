// Attention for a few query rows (a verification's k+1 tokens, a decode step) on the CPU, as one
// custom ggml node. ggml's CPU flash attention goes one query row at a time below 64 rows: each
// row converts every K and V row of its head from F16 again. This kernel reads each K/V row once
// for all the query rows and heads that share it (GQA) and keeps ggml's arithmetic per row: Q
// rounded to F16, Q.K summed in ggml's order, the online softmax cell by cell with expf, the V
// accumulator rounded to F16 at every step. A row's result therefore does not depend on which rows
// it shares the call with.
#pragma once

#include "ggml.h"

namespace psl {

// Whether attention_rows() takes this attention: F32 q of fewer than 64 rows ([dk, n_rows,
// n_head]), F16 K and V ([d, n_kv, n_head_kv] views), an F16 mask, where ggml too would go row by row (not one
// row over 512 cells or more, which ggml splits over the threads by cells) and would accumulate V
// in F32 lanes (not where the CPU's native F16 arithmetic does it: AVX512-FP16 from heads of 128,
// ARM's FP16 vector arithmetic from 32). Where it takes it, a row's numbers are ggml's own on x86
// (attention_rows.cpp says why). Off with
// PYLLAMASPEC_ATTN_ROWS=ggml (read when a graph is built), to compare against ggml's.
bool attention_rows_fit(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const ggml_tensor * mask);

// Whether the kernel runs for heads whose V rows hold dv values: not where ggml's row path has
// native F16 arithmetic for them (see attention_rows_fit), nor with PYLLAMASPEC_ATTN_ROWS=ggml.
bool attention_rows_on(int64_t dv);

// softmax(scale * q.K^T + mask) V as ggml_flash_attn_ext with no bias, softcap or sinks: returns
// F32 [dv, n_head, n_rows]. mask: F16 [n_kv, >= n_rows], a row per query row. *scale must live
// as long as the graph.
ggml_tensor * attention_rows(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                             ggml_tensor * mask, const float * scale);

}  // namespace psl
