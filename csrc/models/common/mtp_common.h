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

}  // namespace psl
