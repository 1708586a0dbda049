// DFlash block-diffusion draft head ("dflash", as llama.cpp's src/models/dflash.cpp reads it):
// no eval of its own; it drafts a block for a target from the inputs of the target's layers
// `target_layers` (engine/head.h).
// * encoder: the target's rows at a position, concatenated, times fc (and its scale), RMS-normed
//   (enc.output_norm); each layer's K (k_norm, NEOX rope at that position) and V (else K,
//   RMS-normed, when the layer has no attn_v) go into the head's cache: the context it attends to;
// * decoder: a block [last token, mask, mask, ...] after the target's cache, in one pass whose
//   attention sees the whole cache and the whole block (not causal, unless the file says so):
//   per layer RMS pre-norm, q/k per-head norms, rope, attention (optional sinks and output
//   scale), optional post-norm, residual; RMS pre-norm SwiGLU (or GeGLU) FFN, optional
//   post-norm, residual, optional output scale. Logits at every block position; d2t maps a
//   reduced vocabulary to target ids. A head without token_embd / output uses the target's.
// The DFlash2 selector, DSpark's Markov head and DeepSeek-V4 stages are refused by name.
#include "models/common/arch_common.h"

#include <algorithm>

namespace psl {

namespace {

void refuse_variants(const GgufFile & f, const std::string & a) {
    const char * path = f.path().c_str();
    if (f.get_int(a + ".hyper_connection.count", 0) > 0) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': DSpark heads on DeepSeek-V4 stages are not supported (DFlash only)", path);
    }
    if (f.has(a + ".selector_rank") || f.has(a + ".conv_kernel_size")) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': DFlash2 heads (selector lattice, block convolutions) are not supported", path);
    }
}

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    refuse_variants(f, a);
    load_head_layers(f, a, hp);
    HParams::Head & h = hp.head;
    h.n_embd_target = hp.n_embd;   // the features are target rows of the head's own width
    h.embd_scale = (float) f.get_float(a + ".embedding_scale", 0.0);
    hp.attn_scale = (float) f.get_float(a + ".attention.scale", 0.0);
    h.value_scale = (float) f.get_float(a + ".attention.value_scale", 0.0);
    const std::string act = f.get_str(a + ".hidden_activation", "silu");
    h.gelu = act == "gelu" || act == "gelu_pytorch_tanh";
    if (!h.gelu && act != "silu") fail(PSL_ERR_UNSUPPORTED, "'%s': DFlash hidden activation '%s' is not supported", path, act.c_str());
    h.block_size = (int32_t) f.get_int("dflash.block_size", 16);
    if (h.block_size < 2 || h.block_size > 1024) fail(PSL_ERR_FORMAT, "'%s': bad dflash.block_size %d", path, h.block_size);
    h.causal = f.get_int("dflash.attention.causal", 0) != 0;
    h.mask_token = (int32_t) f.get_int("tokenizer.ggml.mask_token_id", -1);
    if (h.mask_token < 0) fail(PSL_ERR_FORMAT, "'%s': a DFlash head needs tokenizer.ggml.mask_token_id", path);
    hp.n_swa = (int32_t) f.get_int(a + ".attention.sliding_window", 0);
    if (hp.n_swa < 0) fail(PSL_ERR_FORMAT, "'%s': negative sliding window", path);
    hp.swa_layers.assign(hp.n_layer, false);
    if (hp.n_swa > 0) {   // a single rope: the windowed layers use the main one
        const std::vector<int64_t> pat = f.get_ints(a + ".attention.sliding_window_pattern");
        if ((int32_t) pat.size() != hp.n_layer) {
            fail(PSL_ERR_FORMAT, "'%s': sliding_window_pattern has %zu entries, expected %d", path, pat.size(), hp.n_layer);
        }
        for (int il = 0; il < hp.n_layer; ++il) hp.swa_layers[il] = pat[il] != 0;
        hp.rope_freq_base_swa = hp.rope_freq_base;
    }
    const std::vector<int64_t> sec = f.get_ints(a + ".rope.dimension_sections");
    if (sec.size() > 4) fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections has %zu entries", path, sec.size());
    for (size_t i = 0; i < sec.size(); ++i) {
        if (sec[i] < 0 || sec[i] > 4096) fail(PSL_ERR_FORMAT, "'%s': bad rope section %lld", path, (long long) sec[i]);
        hp.rope_sections[i] = (int32_t) sec[i];
    }
    if (hp.n_embd_head_k != hp.n_embd_head_v) fail(PSL_ERR_FORMAT, "'%s': DFlash needs equal key and value head sizes", path);
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    if (m.files->find("markov_w1.weight")) fail(PSL_ERR_UNSUPPORTED, "'%s': DSpark heads (a Markov head) are not supported", m.file->path().c_str());
    if (m.files->find("selector_hidden.weight")) fail(PSL_ERR_UNSUPPORTED, "'%s': DFlash2 heads (a selector) are not supported", m.file->path().c_str());
    load_d2t(m);
    const int64_t n_embd = hp.n_embd, n_inp = (int64_t) hp.head.target_layers.size() * n_embd;
    const int64_t n_q = (int64_t) hp.n_embd_head_k * hp.n_head;
    m.tok_embd = tl.create("token_embd.weight", {n_embd, hp.n_vocab}, Place::Input, -1, /*required =*/ false);
    m.fc = tl.matrix("fc.weight", {n_inp, n_embd}, Place::Layer, 0);
    m.fc_scale = tl.create("fc.scale", {1}, Place::Layer, 0, /*required =*/ false);
    m.enc_norm = tl.create("enc.output_norm.weight", {n_embd}, Place::Layer, 0);
    m.output_norm = tl.create("output_norm.weight", {n_embd}, Place::Output);
    m.output = tl.matrix("output.weight", {n_embd, head_vocab(m)}, Place::Output, -1, /*required =*/ false);
    if (!m.output && m.tok_embd && hp.head.d2t.empty()) {
        m.output = tl.matrix("token_embd.weight", {n_embd, hp.n_vocab}, Place::Output);
    }
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
        l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, n_q});
        l.wk = tl.layer_matrix(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()});
        l.wv = tl.layer_matrix(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()}, /*required =*/ false);
        l.wo = tl.layer_matrix(il, "attn_output.weight", {n_q, n_embd});
        l.q_norm = tl.layer(il, "attn_q_norm.weight", {hp.n_embd_head_k});
        l.k_norm = tl.layer(il, "attn_k_norm.weight", {hp.n_embd_head_k});
        l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd}, false);
        l.ffn_post_norm = tl.layer(il, "post_ffw_norm.weight", {n_embd}, false);
        l.out_scale = tl.layer(il, "layer_output_scale.weight", {1}, false);
        l.attn_sinks = tl.layer(il, "attn_sinks.weight", {hp.n_head}, false);
        create_ffn(tl, m, il);
    }
    // one table of frequency factors serves every layer
    m.layers[0].rope_freqs = tl.create("rope_freqs.weight", {hp.n_embd_head_k / 2}, Place::Layer, 0, false);
}

bool mrope(const HParams & hp) {
    return hp.rope_sections[0] || hp.rope_sections[1] || hp.rope_sections[2] || hp.rope_sections[3];
}

// NEOX rope, or M-RoPE for a draft of an M-RoPE target (its text positions: every section at p)
ggml_tensor * rope(Graph & g, ggml_tensor * x) {
    const HParams & hp = g.m.hp;
    const int n_ctx_orig = hp.n_ctx_orig_yarn > 0 ? hp.n_ctx_orig_yarn : hp.n_ctx_train;
    if (mrope(hp)) {
        if (!g.inp_pos4) {
            g.inp_pos4 = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, 4 * (int64_t) g.n_tokens);
            ggml_set_name(g.inp_pos4, "inp_pos4");
            ggml_set_input(g.inp_pos4);
        }
        int sections[4];
        std::copy(hp.rope_sections, hp.rope_sections + 4, sections);
        return ggml_rope_multi(g.ctx, x, g.inp_pos4, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_MROPE, n_ctx_orig,
                               hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor,
                               hp.yarn_beta_fast, hp.yarn_beta_slow);
    }
    return ggml_rope_ext(g.ctx, x, g.inp_pos, g.m.layers[0].rope_freqs, hp.n_rot, GGML_ROPE_TYPE_NEOX, n_ctx_orig,
                         hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor,
                         hp.yarn_beta_fast, hp.yarn_beta_slow);
}

// K and V of layer il from its input h [n_embd, n]: K per-head normed and roped; V its own
// projection, else K before the rope, RMS-normed without weight.
std::pair<ggml_tensor *, ggml_tensor *> key_value(Graph & g, int il, ggml_tensor * h) {
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.n_embd_head_k, n = g.n_tokens;
    ggml_tensor * k = ggml_reshape_3d(g.ctx, ggml_mul_mat(g.ctx, l.wk, h), hd, hp.n_head_kv, n);
    ggml_tensor * v = l.wv ? ggml_reshape_3d(g.ctx, ggml_mul_mat(g.ctx, l.wv, h), hd, hp.n_head_kv, n)
                           : ggml_rms_norm(g.ctx, k, hp.norm_eps);
    return {rope(g, g.rms_norm(k, l.k_norm)), v};
}

ggml_tensor * layer(Graph & g, int il, ggml_tensor * x) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.n_embd_head_k;
    ggml_tensor * h = g.rms_norm(x, l.attn_norm);
    ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, h), hd, hp.n_head, g.n_tokens);
    auto [k, v] = key_value(g, il, h);
    const float scale = hp.attn_scale != 0.0f ? hp.attn_scale : 1.0f / sqrtf((float) hd);
    ggml_tensor * a = ggml_mul_mat(ctx, l.wo, g.attention(il, rope(g, g.rms_norm(q, l.q_norm)), k, v, scale));
    if (hp.head.value_scale != 0.0f) a = ggml_scale(ctx, a, hp.head.value_scale);
    if (l.attn_post_norm) a = g.rms_norm(a, l.attn_post_norm);
    x = ggml_add(ctx, a, x);
    ggml_tensor * f = g.rms_norm(x, l.ffn_norm);
    f = hp.head.gelu ? g.ffn_geglu(f, l) : g.ffn_swiglu(f, l);
    if (l.ffn_post_norm) f = g.rms_norm(f, l.ffn_post_norm);
    x = ggml_add(ctx, f, x);
    return l.out_scale ? ggml_mul(ctx, x, l.out_scale) : x;
}

// The decoder: a block of n_tokens at positions after the cache; logits at every position.
ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = head_tokens(g);
    if (hp.head.embd_scale != 0.0f) x = ggml_scale(g.ctx, x, hp.head.embd_scale);
    for (int il = 0; il < hp.n_layer; ++il) x = layer(g, il, x);
    ggml_tensor * logits = ggml_mul_mat(g.ctx, head_output(g), g.rms_norm(x, g.m.output_norm));
    ggml_set_output(logits);
    return logits;
}

// The encoder: the target's features [n_ids n_embd, n_tokens] fused, each layer's K/V of them
// into the cache at their positions.
ggml_tensor * build_encode(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = ggml_mul_mat(g.ctx, g.m.fc, head_input(g, (int64_t) hp.head.target_layers.size() * hp.n_embd));
    if (g.m.fc_scale) x = ggml_mul(g.ctx, x, g.m.fc_scale);
    x = g.rms_norm(x, g.m.enc_norm);
    for (int il = 0; il < hp.n_layer; ++il) {
        auto [k, v] = key_value(g, il, x);
        g.store_kv(il, k, v);
    }
    return x;
}

}  // namespace

extern const ArchOps arch_dflash = {"dflash", hparams, tensors, build, nullptr, build_encode};

}  // namespace psl
