// Qwen2-MoE (Qwen1.5-MoE-A2.7B, Qwen2-57B-A14B): the qwen2 attention (q/k/v biases, NEOX rope);
// each FFN is a mixture of experts (softmax over all, top n_expert_used, weights not
// renormalized) plus a shared expert scaled by a sigmoid gate of its own.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) { load_moe_hparams(f, a, hp); }

void tensors(TensorLoader & tl, psl_model & m) {
    const int64_t n_embd = m.hp.n_embd, n_ff = m.hp.n_ff_shexp;
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        create_attention(tl, m, il, /*bias =*/ true, /*qk_norm =*/ false);
        l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
        create_moe(tl, m, il, /*bias =*/ false);
        l.ffn_gate_inp_shexp = tl.layer(il, "ffn_gate_inp_shexp.weight", {n_embd});
        l.ffn_gate_shexp = tl.layer_matrix(il, "ffn_gate_shexp.weight", {n_embd, n_ff});
        l.ffn_up_shexp = tl.layer_matrix(il, "ffn_up_shexp.weight", {n_embd, n_ff});
        l.ffn_down_shexp = tl.layer_matrix(il, "ffn_down_shexp.weight", {n_ff, n_embd});
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
        ggml_tensor * h = g.rms_norm(x, l.ffn_norm);
        ggml_tensor * f = g.ffn_moe(h, l, Graph::MoeGating::SoftmaxAll, Graph::MoeAct::SwiGLU);
        f = ggml_add(g.ctx, f, g.ffn_shared_expert(h, l));
        x = ggml_add(g.ctx, x, f);
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

extern const ArchOps arch_qwen2moe = {"qwen2moe", hparams, tensors, build};

}  // namespace psl
