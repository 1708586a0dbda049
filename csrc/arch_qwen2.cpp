// Qwen2 (Qwen 1.5, Qwen2, Qwen2.5 and their Coder/Math variants): the llama layer with biases
// on the q, k and v projections and NEOX-ordered rope.
#include "arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile &, const std::string &, HParams &) {}

void tensors(TensorLoader & tl, psl_model & m) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) {
        create_attention(tl, m, il, /*bias =*/ true, /*qk_norm =*/ false);
        create_ffn(tl, m, il);
    }
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    const Graph::AttnOpts o = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base, hp.rope_freq_scale, 1.0f,
                               1.0f / sqrtf((float) hp.n_embd_head_k)};
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), o);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, x, a);
        x = ggml_add(g.ctx, x, g.ffn_swiglu(g.rms_norm(x, l.ffn_norm), l));
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

extern const ArchOps arch_qwen2 = {"qwen2", hparams, tensors, build};

}  // namespace psl
