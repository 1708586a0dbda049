// Qwen3.5 / 3.6 MoE ("qwen35moe": Qwen3.6-35B-A3B, Qwen3.5-122B-A10B, Qwen3.5-397B-A17B): the
// hybrid trunk and MTP block of qwen35 (models/common/qwen35_common.cpp) with a mixture of
// experts in every layer: softmax over all experts, the top n_expert_used renormalized, SwiGLU
// experts, plus a SwiGLU shared expert times sigmoid(ffn_gate_inp_shexp . x); the MTP block's
// FFN is the same. llama.cpp reads no expert_weights_scale for this architecture: neither do we.
#include "models/common/qwen35_common.h"

namespace psl {

namespace {

void ffn_tensors(TensorLoader & tl, psl_model & m, int il) {
    create_moe(tl, m, il, /*bias =*/ false);
    create_shared_expert(tl, m, il, m.hp.n_ff_shexp, /*gated =*/ true);
}

ggml_tensor * ffn(Graph & g, const Layer & l, ggml_tensor * x) {
    const Graph::MoeOpts o = {Graph::MoeGating::SoftmaxAll, Graph::MoeAct::SwiGLU, true, 0.0f};
    return ggml_add(g.ctx, g.ffn_moe(x, l, o), g.ffn_shared_expert(x, l));
}

const Qwen35Ffn k_ffn = {ffn_tensors, ffn};

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    load_qwen35_hparams(f, a, hp);
    load_moe_hparams(f, a, hp);
    hp.expert_weights_scale = 0.0f;
}

void tensors(TensorLoader & tl, psl_model & m) { create_qwen35_tensors(tl, m, k_ffn); }
ggml_tensor * build(Graph & g) { return build_qwen35(g, k_ffn); }
ggml_tensor * build_mtp(Graph & g) { return build_qwen35_mtp(g, k_ffn); }

}  // namespace

extern const ArchOps arch_qwen35moe = {"qwen35moe", hparams, tensors, build, build_mtp, nullptr, false, true, true};

}  // namespace psl
