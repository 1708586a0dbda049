// Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B, Qwen3-Coder-30B-A3B): the qwen3 attention (per-head
// q/k RMS norms, NEOX rope, no biases) and a mixture-of-experts FFN in every layer: softmax over
// all experts, the top n_expert_used of them, their weights renormalized to sum to 1 (llama.cpp
// does so for every qwen3moe file, whatever expert_weights_norm says).
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    load_moe_hparams(f, a, hp);
    hp.expert_weights_norm = true;
}

void tensors(TensorLoader & tl, psl_model & m) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) {
        create_attention(tl, m, il, /*bias =*/ false, /*qk_norm =*/ true);
        m.layers[il].ffn_norm = tl.layer(il, "ffn_norm.weight", {m.hp.n_embd});
        create_moe(tl, m, il, /*bias =*/ false);
    }
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    const Graph::AttnOpts o = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base, hp.rope_freq_scale, 1.0f,
                               1.0f / sqrtf((float) hp.n_embd_head_k)};
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), o);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, x, a);
        ggml_tensor * f = g.ffn_moe(g.rms_norm(x, l.ffn_norm), l, Graph::MoeGating::SoftmaxAll, Graph::MoeAct::SwiGLU);
        x = ggml_add(g.ctx, x, f);
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

extern const ArchOps arch_qwen3moe = {"qwen3moe", hparams, tensors, build};

}  // namespace psl
