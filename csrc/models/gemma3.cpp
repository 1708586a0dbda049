// Gemma 3: embeddings scaled by sqrt(n_embd); per layer RMS pre-norm, per-head q/k RMS norms,
// NEOX rope, q scaled by 1/sqrt(key_length), attention, post-attention norm, residual; pre-norm,
// GeGLU (tanh GELU), post-FFN norm, residual; final norm; head tied to the embeddings.
// Five of every six layers attend over a sliding window with their own rope base (a mask over
// the full-length cache, so rollback stays O(1)); every sixth is global.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    hp.n_swa = (int32_t) f.get_int(a + ".attention.sliding_window", 0);
    if (hp.n_swa < 0) fail(PSL_ERR_FORMAT, "'%s': negative sliding window", f.path().c_str());
    // llama.cpp's values for Gemma 3: local layers use rope base 10000 without scaling, and
    // every sixth layer (il % 6 == 5) is global.
    hp.rope_freq_base_swa = (float) f.get_float(a + ".rope.freq_base_swa", 10000.0);
    hp.swa_layers.assign(hp.n_layer, false);
    for (int il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = hp.n_swa > 0 && il % 6 < 5;
    // Gemma 3 27B (62 layers) scales queries by its query_pre_attn_scalar = n_embd / n_head.
    hp.final_logit_softcap = (float) f.get_float(a + ".final_logit_softcapping", 0.0);
    hp.attn_scale = hp.n_layer == 62 ? 1.0f / sqrtf((float) (hp.n_embd / hp.n_head))
                                     : 1.0f / sqrtf((float) hp.n_embd_head_k);
}

void tensors(TensorLoader & tl, psl_model & m) {
    create_embeddings(tl, m);
    const int64_t n_embd = m.hp.n_embd;
    for (int il = 0; il < m.hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        create_attention(tl, m, il, /*bias =*/ false, /*qk_norm =*/ true);
        l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
        create_ffn(tl, m, il);
        l.ffn_post_norm = tl.layer(il, "post_ffw_norm.weight", {n_embd});
    }
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    const Graph::AttnOpts global = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base, hp.rope_freq_scale, hp.attn_scale, 1.0f};
    const Graph::AttnOpts local = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base_swa, 1.0f, hp.attn_scale, 1.0f};

    ggml_tensor * x = g.embed(sqrtf((float) hp.n_embd));
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), hp.is_swa(il) ? local : global);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(ctx, x, g.rms_norm(a, l.attn_post_norm));
        ggml_tensor * f = g.ffn_geglu(g.rms_norm(x, l.ffn_norm), l);
        x = ggml_add(ctx, x, g.rms_norm(f, l.ffn_post_norm));
    }
    ggml_tensor * logits = g.output(x, g.m.output_norm);
    if (hp.final_logit_softcap > 0.0f && !g.no_outputs() && !g.embeddings) {
        const float c = hp.final_logit_softcap;
        logits = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, logits, 1.0f / c)), c);
    }
    return logits;
}

}  // namespace

extern const ArchOps arch_gemma3 = {"gemma3", hparams, tensors, build, nullptr, nullptr, false, true};

}  // namespace psl
