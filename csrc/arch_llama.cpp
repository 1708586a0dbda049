// The llama family (LLaMA 1/2/3, Mistral, TinyLlama, SmolLM, CodeLlama): RMSNorm, RoPE
// (normal mode), grouped-query attention, SwiGLU, output head tied to the embeddings when
// output.weight is absent.
#include "arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & arch, HParams & hp) {
    (void) f;
    (void) arch;
    (void) hp;
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, n_vocab = hp.n_vocab, n_ff = hp.n_ff;
    const int64_t n_q = (int64_t) hp.n_embd_head_k * hp.n_head;
    create_embeddings(tl, m);
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
        l.wq = tl.layer(il, "attn_q.weight", {n_embd, n_q});
        l.wk = tl.layer(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()});
        l.wv = tl.layer(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()});
        l.wo = tl.layer(il, "attn_output.weight", {(int64_t) hp.n_embd_head_v * hp.n_head, n_embd});
        l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
        l.ffn_gate = tl.layer(il, "ffn_gate.weight", {n_embd, n_ff});
        l.ffn_up = tl.layer(il, "ffn_up.weight", {n_embd, n_ff});
        l.ffn_down = tl.layer(il, "ffn_down.weight", {n_ff, n_embd});
    }
    (void) n_vocab;
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    const float scale = 1.0f / sqrtf((float) hp.n_embd_head_k);

    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        ggml_tensor * h = g.rms_norm(x, l.attn_norm);
        ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, h), hp.n_embd_head_k, hp.n_head, g.n_tokens);
        ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wk, h), hp.n_embd_head_k, hp.n_head_kv, g.n_tokens);
        ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wv, h), hp.n_embd_head_v, hp.n_head_kv, g.n_tokens);
        q = g.rope(q, GGML_ROPE_TYPE_NORMAL, hp.rope_freq_base);
        k = g.rope(k, GGML_ROPE_TYPE_NORMAL, hp.rope_freq_base);
        ggml_tensor * attn = g.attention(il, q, k, v, scale);
        if (il == hp.n_layer - 1) {   // only the rows that produce logits go on
            attn = g.keep_outputs(attn);
            x = g.keep_outputs(x);
        }
        x = ggml_add(ctx, x, ggml_mul_mat(ctx, l.wo, attn));
        x = ggml_add(ctx, x, g.ffn_swiglu(g.rms_norm(x, l.ffn_norm), l));
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

extern const ArchOps arch_llama = {"llama", hparams, tensors, build};

}  // namespace psl
