// Qwen3-VL's mixture-of-experts text model ("qwen3vlmoe": Qwen3-VL-30B-A3B, 235B-A22B): the trunk
// of models/common/qwen3vl_common (qwen3's layer with IMROPE sections and deepstack) with
// qwen3moe's FFN: softmax over all experts, the top n_expert_used, their weights renormalized
// (llama.cpp does so for every qwen3vlmoe file) and scaled by expert_weights_scale if given.
#include "models/common/qwen3vl_common.h"

namespace psl {

namespace {

void ffn_tensors(TensorLoader & tl, psl_model & m, int il) { create_moe(tl, m, il, /*bias =*/ false); }

ggml_tensor * ffn(Graph & g, const Layer & l, ggml_tensor * x) {
    return g.ffn_moe(x, l, Graph::MoeGating::SoftmaxAll, Graph::MoeAct::SwiGLU);
}

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    load_moe_hparams(f, a, hp);
    hp.expert_weights_norm = true;
    load_qwen3vl_hparams(f, a, hp);
}
void tensors(TensorLoader & tl, psl_model & m) { create_qwen3vl_tensors(tl, m, ffn_tensors); }
ggml_tensor * build(Graph & g) { return build_qwen3vl(g, ffn); }

}  // namespace

extern const ArchOps arch_qwen3vlmoe = {"qwen3vlmoe", hparams, tensors, build, nullptr, nullptr, false, true, true};

}  // namespace psl
