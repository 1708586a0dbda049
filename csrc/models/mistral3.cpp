// Mistral Small 3.x, Ministral 3, Devstral (GGUF architecture "mistral3"), as llama.cpp b11434
// builds them (src/models/mistral3.cpp): the llama layer (RMS pre-norms, NORMAL rope with the
// file's rope_freqs factors when present, grouped-query attention scaled 1/sqrt(head), SwiGLU),
// with optional q/k/v/output biases, YaRN with the file's beta and log-multiplier keys, and
// Llama-4 attention temperature scaling of q (attention.temperature_scale, its floor the YaRN
// original context); layers are dense (optional FFN biases), or a mixture of experts (softmax,
// top-k renormalized) when the file has experts.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    hp.yarn_beta_fast = (float) f.get_float(a + ".rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
    hp.yarn_beta_slow = (float) f.get_float(a + ".rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    set_yarn_log_mul(f, a, hp, (float) f.get_float(a + ".rope.scaling.yarn_log_multiplier", 0.0), false);
    const int32_t n_orig = hp.n_ctx_orig_yarn > 0 ? hp.n_ctx_orig_yarn : hp.n_ctx_train;
    hp.attn_temp_scale = (float) f.get_float(a + ".attention.temperature_scale", 0.0);
    hp.attn_temp_floor = n_orig;   // llama.cpp: the floor scale is n_ctx_orig_yarn
    if (!std::isfinite(hp.attn_temp_scale) || !std::isfinite(hp.yarn_beta_fast) || !std::isfinite(hp.yarn_beta_slow)) {
        fail(PSL_ERR_FORMAT, "'%s': YaRN / attention temperature parameters out of range", f.path().c_str());
    }
    if (f.get_int(a + ".expert_count", 0) > 0) {
        load_moe_hparams(f, a, hp);
        hp.expert_weights_scale = 0.0f;   // llama.cpp reads no scale for mistral3
    }
    if (hp.n_rot != hp.n_embd_head_k || hp.n_embd_head_k != hp.n_embd_head_v) {
        fail(PSL_ERR_FORMAT, "'%s': mistral3 needs rope over the whole head and equal key / value heads", f.path().c_str());
    }
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, n_q = (int64_t) hp.n_embd_head_k * hp.n_head, n_kv = hp.n_embd_k_gqa();
    create_embeddings(tl, m);
    // one tensor for every layer (llama.cpp duplicates it)
    ggml_tensor * rope_freqs = tl.create("rope_freqs.weight", {hp.n_rot / 2}, Place::Layer, 0, false);
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        create_attention(tl, m, il, /*bias =*/ false, /*qk_norm =*/ false);
        l.bq = tl.layer(il, "attn_q.bias", {n_q}, false);
        l.bk = tl.layer(il, "attn_k.bias", {n_kv}, false);
        l.bv = tl.layer(il, "attn_v.bias", {n_kv}, false);
        l.bo = tl.layer(il, "attn_output.bias", {n_embd}, false);
        l.rope_freqs = rope_freqs;
        if (hp.n_expert == 0) {
            create_ffn(tl, m, il);
            l.ffn_gate_b = tl.layer(il, "ffn_gate.bias", {hp.ff_length(il)}, false);
            l.ffn_up_b = tl.layer(il, "ffn_up.bias", {hp.ff_length(il)}, false);
            l.ffn_down_b = tl.layer(il, "ffn_down.bias", {n_embd}, false);
        } else {
            l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
            create_moe(tl, m, il, /*bias =*/ false);
        }
    }
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        Graph::AttnOpts o = {GGML_ROPE_TYPE_NORMAL, hp.rope_freq_base, hp.rope_freq_scale, 1.0f,
                             1.0f / sqrtf((float) hp.n_embd_head_k)};
        o.rope_factors = l.rope_freqs;
        ggml_tensor * a = g.self_attention(il, g.rms_norm(x, l.attn_norm), o);
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, a, x);
        ggml_tensor * h = g.rms_norm(x, l.ffn_norm);
        ggml_tensor * f = l.ffn_gate_inp ? g.ffn_moe(h, l, Graph::MoeOpts{Graph::MoeGating::SoftmaxAll,
                                                                           Graph::MoeAct::SwiGLU, true, 0.0f})
                                         : g.ffn_swiglu(h, l);
        x = ggml_add(g.ctx, f, x);
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace

// takes_rows: the layers read the embeddings alone (no per-layer input from the ids), so an image's
// rows (Mistral Small 3.x's pixtral projector) go in place of tokens
extern const ArchOps arch_mistral3 = {"mistral3", hparams, tensors, build, nullptr, nullptr, false, /*takes_rows =*/ true};

}  // namespace psl
