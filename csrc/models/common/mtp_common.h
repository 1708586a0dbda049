// The NextN / MTP block of architectures whose block is one of their own layers behind an input
// projection (deepseek2 V3-style, glm4moe), as llama.cpp's graph_mtp builds it:
//   y  = eh_proj([enorm(embed(x_p)); hnorm(h_{p-1})])      (nextn.embed_tokens if the file has it)
//   y  = the architecture's layer on y                     (its own KV cache at layer n_layer)
//   h' = shared_head_norm(y) (else output_norm); logits = shared_head_head(h') (else the head)
// The target's graph fills the block's cache for its batch (nextn_fill); a draft step runs it on
// one token (nextn_draft, ArchOps::build_mtp). engine/mtp.h drives both.
#pragma once

#include "models/common/arch_common.h"

namespace psl {

struct NextnOps {
    // the architecture's layer il on the residual stream x (last: keep only the output rows)
    ggml_tensor * (*block)(Graph & g, int il, ggml_tensor * x, bool last);
};

// The first NextN block after the trunk into m.layers[n_layer] (m.mtp_layer), its layer weights
// by layer_tensors; a file that announces nextn layers without their tensors has no MTP.
void load_nextn_layer(TensorLoader & tl, psl_model & m, void (*layer_tensors)(TensorLoader &, psl_model &, int));
// In the target's graph: x the trunk's output (every row), embd the token embeddings; keeps the
// normed hidden rows (g.mtp_hidden) and writes the block's cache for the batch.
void nextn_fill(Graph & g, ggml_tensor * embd, ggml_tensor * x, const NextnOps & ops);
// One draft step: logits [n_vocab, 1]; g.mtp_hidden is the block's normed output row.
ggml_tensor * nextn_draft(Graph & g, const NextnOps & ops);
// The parts every MTP block shares (qwen35's too): in the target's graph, the trunk's output x
// normed and kept (g.mtp_hidden), returned shifted by one row (token i pairs with the hidden
// state of token i - 1; the first with the one kept before, input g.inp_mtp_h).
ggml_tensor * mtp_prev_hidden(Graph & g, ggml_tensor * x);
// In a draft step: the hidden rows given as input, one per token (g.inp_mtp_h); and the head over
// the block's output y: keeps its normed rows (g.mtp_hidden), returns the logits [n_vocab, n_tokens].
ggml_tensor * mtp_draft_input(Graph & g);
ggml_tensor * mtp_head(Graph & g, ggml_tensor * y);
// The whole target graph of such an architecture: its layers (ops.block), the NextN block's
// cache when g.mtp, the output.
ggml_tensor * nextn_build(Graph & g, const NextnOps & ops);

// The DeepSeek-V3-style FFN these architectures share: the first n_layer_dense_lead layers
// dense (SwiGLU), the others routed experts (gating per hp.expert_gating, weights normalised
// and scaled per the file) plus the shared expert where the layer has one.
ggml_tensor * ffn_dense_lead_moe(Graph & g, int il, ggml_tensor * x);

}  // namespace psl
