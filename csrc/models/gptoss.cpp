// gpt-oss (OpenAI's gpt-oss-20b / -120b, GGUF architecture "gpt-oss"): RMS pre-norms; attention
// with q/k/v/output biases, NEOX rope (YaRN as the file says), a learned sink logit per head in
// every softmax, and sliding-window attention on every other layer (even layers, window
// attention.sliding_window, same rope); the FFN is a mixture of experts with biases whose router
// takes the top n_expert_used raw logits and softmaxes over those, and whose activation is the
// clamped SwiGLU variant (alpha 1.702, limit 7). Experts are usually MXFP4.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    load_moe_hparams(f, a, hp);
    hp.n_swa = (int32_t) f.get_int(a + ".attention.sliding_window");
    if (hp.n_swa <= 0) fail(PSL_ERR_FORMAT, "'%s': sliding window must be positive", f.path().c_str());
    // llama.cpp's default pattern for gpt-oss: of every 2 layers the first is windowed
    const int64_t pattern = f.get_int(a + ".attention.sliding_window_pattern", 2);
    if (pattern <= 0) fail(PSL_ERR_FORMAT, "'%s': bad sliding window pattern", f.path().c_str());
    hp.swa_layers.assign(hp.n_layer, false);
    for (int il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = il % pattern < pattern - 1;
    hp.rope_freq_base_swa = (float) f.get_float(a + ".rope.freq_base_swa", hp.rope_freq_base);
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd;
    create_embeddings(tl, m);
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        create_attention(tl, m, il, /*bias =*/ true, /*qk_norm =*/ false);
        l.bo = tl.layer(il, "attn_output.bias", {n_embd});
        l.attn_sinks = tl.layer(il, "attn_sinks.weight", {hp.n_head});
        l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
        create_moe(tl, m, il, /*bias =*/ true);
    }
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    const float kq_scale = 1.0f / sqrtf((float) hp.n_rot);
    const Graph::AttnOpts global = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base, hp.rope_freq_scale, 1.0f, kq_scale};
    const Graph::AttnOpts local = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base_swa, hp.rope_freq_scale, 1.0f, kq_scale};
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), hp.is_swa(il) ? local : global);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, x, a);
        // the "post-attention" norm is the FFN's pre-norm
        ggml_tensor * f = g.ffn_moe(g.rms_norm(x, l.attn_post_norm), l, Graph::MoeGating::SoftmaxSelected,
                                    Graph::MoeAct::SwiGLUOai);
        x = ggml_add(g.ctx, x, f);
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

extern const ArchOps arch_gptoss = {"gpt-oss", hparams, tensors, build};

}  // namespace psl
