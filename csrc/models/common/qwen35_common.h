// What Qwen3.5 dense (qwen35) and Qwen3.5 / 3.6 MoE (qwen35moe) share: the hybrid trunk
// (Gated DeltaNet linear attention and gated full attention, llama.cpp's build_layer_attn_linear
// and build_layer_attn, identical in both) and the NextN / MTP block; only the FFN differs, and
// each architecture passes its own.
#pragma once

#include "models/common/arch_common.h"

namespace psl {

// A layer's FFN: the tensors of layer il, and its graph on the post-attention-normed input.
struct Qwen35Ffn {
    void (*tensors)(TensorLoader & tl, psl_model & m, int il);
    ggml_tensor * (*build)(Graph & g, const Layer & l, ggml_tensor * x);
};

// The linear-attention shape, the layer kinds, M-RoPE sections, the MTP layer count (hp.n_layer
// becomes the trunk's length).
void load_qwen35_hparams(const GgufFile & f, const std::string & a, HParams & hp);
// Embeddings, every trunk layer (its mixer, norms and FFN) and the first MTP block if any.
void create_qwen35_tensors(TensorLoader & tl, psl_model & m, const Qwen35Ffn & ffn);
// The trunk's graph (with the MTP block's cache fill when g.mtp), and one MTP draft step.
ggml_tensor * build_qwen35(Graph & g, const Qwen35Ffn & ffn);
ggml_tensor * build_qwen35_mtp(Graph & g, const Qwen35Ffn & ffn);

}  // namespace psl
