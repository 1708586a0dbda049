// The llama family (LLaMA 1/2/3, Mistral, TinyLlama, SmolLM, CodeLlama): RMSNorm, RoPE
// (normal mode), grouped-query attention, SwiGLU, output head tied to the embeddings when
// output.weight is absent. Its layer is also the base of qwen2 and qwen3.
#include "models/common/arch_common.h"

namespace psl {

void create_llama_like(TensorLoader & tl, psl_model & m, bool bias, bool qk_norm) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) {
        create_attention(tl, m, il, bias, qk_norm);
        create_ffn(tl, m, il);
    }
}

ggml_tensor * build_llama_like(Graph & g, int rope_mode) {
    const HParams & hp = g.m.hp;
    const Graph::AttnOpts o = {rope_mode, hp.rope_freq_base, hp.rope_freq_scale, 1.0f,
                               1.0f / sqrtf((float) hp.n_embd_head_k)};
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), o);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, x, a);
        x = ggml_add(g.ctx, x, g.ffn_swiglu(g.rms_norm(x, l.ffn_norm), l));
    }
    return g.output(x, g.m.output_norm);
}

namespace {

void hparams(const GgufFile &, const std::string &, HParams &) {}

void tensors(TensorLoader & tl, psl_model & m) { create_llama_like(tl, m, /*bias =*/ false, /*qk_norm =*/ false); }

ggml_tensor * build(Graph & g) { return build_llama_like(g, GGML_ROPE_TYPE_NORMAL); }

}  // namespace

extern const ArchOps arch_llama = {"llama", hparams, tensors, build, nullptr, nullptr, false, true};

}  // namespace psl
