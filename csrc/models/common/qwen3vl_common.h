// What Qwen3-VL's text models (qwen3vl dense, qwen3vlmoe) share, as llama.cpp b11434 builds them
// (src/models/qwen3vl.cpp, qwen3vl-moe.cpp): qwen3's layer (RMS pre-norms, per-head q/k RMS norms,
// no biases) with interleaved M-RoPE (IMROPE) over rope.dimension_sections, and deepstack: an
// image's rows are n_embd * (1 + n_deepstack_layers) wide, the first n_embd are the embedding
// and slice i + 1 is added to the hidden state after layer i (a text token's slices are zero).
// Only the FFN differs; each architecture passes its own.
#pragma once

#include "models/common/arch_common.h"

namespace psl {

// n_deepstack_layers, the M-RoPE sections (required), the head checks.
void load_qwen3vl_hparams(const GgufFile & f, const std::string & a, HParams & hp);
// The layers' attention tensors and norms; ffn(tl, m, il) adds each layer's FFN.
void create_qwen3vl_tensors(TensorLoader & tl, psl_model & m, void (*ffn)(TensorLoader &, psl_model &, int));
// The graph; ffn(g, layer, x) is a layer's FFN on its normed input.
ggml_tensor * build_qwen3vl(Graph & g, ggml_tensor * (*ffn)(Graph &, const Layer &, ggml_tensor *));

}  // namespace psl
