// Gemma 4 (E2B/E4B, 26B-A4B MoE, 31B dense; GGUF architecture "gemma4"), as llama.cpp b11434
// builds it (src/models/gemma4.cpp):
// * embeddings times sqrt(n_embd); per layer: RMS pre-norm, attention, post-attention norm,
//   residual; FFN pre-norm, GeGLU (tanh GELU), post-FFN norm, residual; final norm, head,
//   final soft-capping (30 unless the file says otherwise);
// * which layers attend over a sliding window is a per-layer array; window layers have their own
//   head size, head counts, rope width and base (freq_base_swa, no scaling); full layers rope
//   with frequency factors (rope_freqs: 1e30 leaves a pair unrotated, "proportional" rope);
// * attention: q/k RMS norms with weights, v RMS-normed without, NEOX rope, kq scale 1; v is k
//   when a layer has no attn_v; the last shared_kv_layers layers cache nothing and attend over
//   the cache of the last earlier layer of their kind (HParams::kv_source);
// * MoE layers (26B-A4B): the dense FFN runs as a shared expert (post norm 1) beside the
//   experts (pre norm 2, post norm 2); the router reads the un-weighted RMS norm of the
//   residual stream / sqrt(n_embd) times its own scale; softmax, top-k renormalized, GeGLU
//   experts with a per-expert output scale;
// * per-layer inputs (E2B/E4B): a token table and a projection of the embeddings give each
//   layer a vector that gates a small GELU bottleneck added to its output; at an image's rows
//   the table's row is token 0's (llama.cpp's padding row for an embeddings batch);
// * a per-layer output scale (layer_output_scale) when the file has it.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    const std::vector<int64_t> swa = f.get_ints(a + ".attention.sliding_window_pattern");
    if ((int32_t) swa.size() != hp.n_layer) {
        fail(PSL_ERR_FORMAT, "'%s': %s.attention.sliding_window_pattern must have one entry per layer (%d), has %zu",
             path, a.c_str(), hp.n_layer, swa.size());
    }
    hp.swa_layers.assign(swa.begin(), swa.end());
    hp.n_swa = (int32_t) f.get_int(a + ".attention.sliding_window");
    if (hp.n_swa <= 0) fail(PSL_ERR_FORMAT, "'%s': sliding window must be positive", path);
    hp.rope_freq_base_swa = (float) f.get_float(a + ".rope.freq_base_swa", 10000.0);   // llama.cpp's default
    hp.attn_scale = 1.0f;
    // llama.cpp's default when the key is absent is 30 (llama_hparams), not "off"
    hp.final_logit_softcap = (float) f.get_float(a + ".final_logit_softcapping", 30.0);
    hp.n_embd_per_layer = (int32_t) f.get_int(a + ".embedding_length_per_layer_input", 0);
    if (hp.n_embd_per_layer < 0 || hp.n_embd_per_layer > (1 << 16)) fail(PSL_ERR_FORMAT, "'%s': bad per-layer input width", path);
    if (f.get_int(a + ".expert_count", 0) > 0) load_moe_hparams(f, a, hp);
    const int64_t shared = f.get_int(a + ".attention.shared_kv_layers", 0);
    if (shared < 0 || shared > hp.n_layer - 2) fail(PSL_ERR_FORMAT, "'%s': shared_kv_layers %lld out of range", path, (long long) shared);
    if (shared > 0) hp.n_layer_kv = hp.n_layer - (int32_t) shared;
    if (hp.n_embd_head_k != hp.n_embd_head_v || hp.n_embd_head_k_swa != hp.n_embd_head_v_swa) {
        fail(PSL_ERR_FORMAT, "'%s': Gemma 4 needs equal key and value head sizes", path);
    }
    for (int il = 0; il < hp.n_layer; ++il) {   // a shared layer must find a cache of its own shape
        const int src = hp.kv_source(il);
        if (src != il && (src < 0 || hp.is_swa(src) != hp.is_swa(il) || hp.head_count_kv(src) != hp.head_count_kv(il))) {
            fail(PSL_ERR_FORMAT, "'%s': layer %d shares the cache of layer %d, whose attention differs", path, il, src);
        }
    }
}

// q/k/v (or one fused projection), q/k norms, the output projection; k and its norm are absent
// on shared layers, v may be absent (k stands for it).
void attention_tensors(TensorLoader & tl, psl_model & m, int il) {
    const HParams & hp = m.hp;
    Layer & l = m.layers[il];
    const int64_t n_embd = hp.n_embd, hd = hp.head_k(il), n_q = hd * hp.head_count(il), n_kv = hd * hp.head_count_kv(il);
    const bool has_kv = hp.kv_source(il) == il;
    l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
    l.wqkv = tl.layer_matrix(il, "attn_qkv.weight", {n_embd, n_q + 2 * n_kv}, false);
    if (!l.wqkv) {
        l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, n_q});
        l.wk = tl.layer_matrix(il, "attn_k.weight", {n_embd, n_kv}, has_kv);
        l.wv = tl.layer_matrix(il, "attn_v.weight", {n_embd, n_kv}, false);
    }
    l.wo = tl.layer_matrix(il, "attn_output.weight", {n_q, n_embd});
    l.q_norm = tl.layer(il, "attn_q_norm.weight", {hd});
    l.k_norm = tl.layer(il, "attn_k_norm.weight", {hd}, has_kv);
    l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
    l.out_scale = tl.layer(il, "layer_output_scale.weight", {1}, false);
}

void moe_tensors(TensorLoader & tl, psl_model & m, int il) {
    const int64_t n_embd = m.hp.n_embd, n_ff = m.hp.n_ff_exp, n_exp = m.hp.n_expert;
    Layer & l = m.layers[il];
    l.ffn_gate_inp_s = tl.layer(il, "ffn_gate_inp.scale", {n_embd});
    l.ffn_pre_norm_2 = tl.layer(il, "pre_ffw_norm_2.weight", {n_embd});
    l.ffn_post_norm_1 = tl.layer(il, "post_ffw_norm_1.weight", {n_embd});
    l.ffn_post_norm_2 = tl.layer(il, "post_ffw_norm_2.weight", {n_embd});
    l.ffn_gate_up_exps = tl.layer_matrix(il, "ffn_gate_up_exps.weight", {n_embd, 2 * n_ff, n_exp}, false);
    if (!l.ffn_gate_up_exps) {
        l.ffn_gate_exps = tl.layer_matrix(il, "ffn_gate_exps.weight", {n_embd, n_ff, n_exp});
        l.ffn_up_exps = tl.layer_matrix(il, "ffn_up_exps.weight", {n_embd, n_ff, n_exp});
    }
    l.ffn_down_exps = tl.layer_matrix(il, "ffn_down_exps.weight", {n_ff, n_embd, n_exp});
    l.ffn_down_exps_s = tl.layer(il, "ffn_down_exps.scale", {n_exp}, false);
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, n_pl = hp.n_embd_per_layer;
    create_embeddings(tl, m);
    if (n_pl > 0) {
        m.per_layer_tok_embd = tl.create("per_layer_token_embd.weight", {n_pl * hp.n_layer, hp.n_vocab}, Place::Input);
        m.per_layer_model_proj = tl.matrix("per_layer_model_proj.weight", {n_embd, n_pl * hp.n_layer}, Place::Input);
        m.per_layer_proj_norm = tl.create("per_layer_proj_norm.weight", {n_pl}, Place::Input);
    }
    ggml_tensor * rope_freqs = nullptr;   // one tensor, read by every full-attention layer
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        attention_tensors(tl, m, il);
        if (!hp.is_swa(il)) {
            if (!rope_freqs) rope_freqs = tl.create("rope_freqs.weight", {hp.head_k(il) / 2}, Place::Layer, il);
            if (rope_freqs->ne[0] != hp.head_k(il) / 2) fail(PSL_ERR_FORMAT, "'%s': rope_freqs does not fit layer %d", m.file->path().c_str(), il);
            l.rope_freqs = rope_freqs;
        }
        create_ffn(tl, m, il);
        l.ffn_post_norm = tl.layer(il, "post_ffw_norm.weight", {n_embd});
        // a layer with a router is a mixture-of-experts layer
        if (hp.n_expert > 0) l.ffn_gate_inp = tl.layer_matrix(il, "ffn_gate_inp.weight", {n_embd, hp.n_expert}, false);
        if (l.ffn_gate_inp) moe_tensors(tl, m, il);
        if (n_pl > 0) {
            l.per_layer_inp_gate = tl.layer_matrix(il, "inp_gate.weight", {n_embd, n_pl});
            l.per_layer_proj = tl.layer_matrix(il, "proj.weight", {n_pl, n_embd});
            l.per_layer_post_norm = tl.layer(il, "post_norm.weight", {n_embd});
        }
    }
}

// The per-layer inputs [n_embd_per_layer, n_tokens, n_layer]: the token's row of the table
// (times sqrt(width); token 0's for rows) plus the normed projection of the embeddings x (divided by sqrt(n_embd)),
// over sqrt(2).
ggml_tensor * per_layer_inputs(Graph & g, ggml_tensor * x) {
    const psl_model & m = g.m;
    ggml_context * ctx = g.ctx;
    const int64_t n_pl = m.hp.n_embd_per_layer, n_layer = m.hp.n_layer, n = g.n_tokens;
    ggml_tensor * tok;
    if (g.rows_input) {   // an image's rows: token 0's row (the padding), as llama.cpp's embeddings batch
        tok = ggml_cast(ctx, ggml_view_1d(ctx, m.per_layer_tok_embd, n_pl * n_layer, 0), GGML_TYPE_F32);
        tok = ggml_scale(ctx, ggml_reshape_3d(ctx, tok, n_pl, n_layer, 1), sqrtf((float) n_pl));
    } else {
        tok = ggml_get_rows(ctx, m.per_layer_tok_embd, g.inp_tokens);
        tok = ggml_scale(ctx, ggml_reshape_3d(ctx, tok, n_pl, n_layer, n), sqrtf((float) n_pl));
    }
    ggml_tensor * proj = ggml_scale(ctx, ggml_mul_mat(ctx, m.per_layer_model_proj, x), 1.0f / sqrtf((float) m.hp.n_embd));
    proj = g.rms_norm(ggml_reshape_3d(ctx, proj, n_pl, n_layer, n), m.per_layer_proj_norm);
    ggml_tensor * inp = ggml_scale(ctx, ggml_add(ctx, proj, tok), 1.0f / sqrtf(2.0f));
    return ggml_cont(ctx, ggml_permute(ctx, inp, 0, 2, 1, 3));
}

ggml_tensor * attention(Graph & g, int il, ggml_tensor * h) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.head_k(il), nh = hp.head_count(il), nkv = hp.head_count_kv(il), n = g.n_tokens;
    ggml_tensor * q, * k = nullptr, * v = nullptr;
    if (l.wqkv) {
        ggml_tensor * qkv = ggml_mul_mat(ctx, l.wqkv, h);
        const size_t es = ggml_element_size(qkv);
        q = ggml_cont(ctx, ggml_view_2d(ctx, qkv, hd * nh, n, qkv->nb[1], 0));
        k = ggml_cont(ctx, ggml_view_2d(ctx, qkv, hd * nkv, n, qkv->nb[1], hd * nh * es));
        v = ggml_cont(ctx, ggml_view_2d(ctx, qkv, hd * nkv, n, qkv->nb[1], hd * (nh + nkv) * es));
    } else {
        q = ggml_mul_mat(ctx, l.wq, h);
        if (l.wk) k = ggml_mul_mat(ctx, l.wk, h);
        if (l.wk) v = l.wv ? ggml_mul_mat(ctx, l.wv, h) : k;   // no v_proj: k serves as v
    }
    const bool swa = hp.is_swa(il);
    const float base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base, scale = swa ? 1.0f : hp.rope_freq_scale;
    auto rope = [&](ggml_tensor * t) { return g.rope(t, GGML_ROPE_TYPE_NEOX, base, scale, hp.rot(il), l.rope_freqs); };
    q = rope(g.rms_norm(ggml_reshape_3d(ctx, q, hd, nh, n), l.q_norm));
    if (hp.kv_source(il) != il) k = v = nullptr;   // a shared layer reads its source's cache
    if (k) {
        v = ggml_rms_norm(ctx, ggml_reshape_3d(ctx, v, hd, nkv, n), hp.norm_eps);
        k = rope(g.rms_norm(ggml_reshape_3d(ctx, k, hd, nkv, n), l.k_norm));
    }
    ggml_tensor * a = g.attention(il, q, k, v, hp.attn_scale);
    if (il == hp.n_layer - 1) a = g.keep_outputs(a);   // only the rows that produce logits go on
    return ggml_mul_mat(ctx, l.wo, a);
}

// The FFN block of a layer from the residual stream after attention (its normed output added).
ggml_tensor * ffn(Graph & g, const Layer & l, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    ggml_tensor * dense = g.ffn_geglu(g.rms_norm(x, l.ffn_norm), l);
    if (!l.ffn_gate_inp) return dense;
    dense = g.rms_norm(dense, l.ffn_post_norm_1);
    ggml_tensor * r = ggml_scale(ctx, ggml_rms_norm(ctx, x, hp.norm_eps), 1.0f / sqrtf((float) hp.n_embd));
    ggml_tensor * logits = ggml_mul_mat(ctx, l.ffn_gate_inp, ggml_mul(ctx, r, l.ffn_gate_inp_s));
    const Graph::MoeOpts o = {Graph::MoeGating::SoftmaxAll, Graph::MoeAct::GeGLU, true, 1.0f, logits};
    ggml_tensor * experts = g.rms_norm(g.ffn_moe(g.rms_norm(x, l.ffn_pre_norm_2), l, o), l.ffn_post_norm_2);
    return ggml_add(ctx, dense, experts);
}

// The per-layer input's contribution: gelu(gate(x)) times this layer's input, projected, normed.
ggml_tensor * per_layer_term(Graph & g, int il, ggml_tensor * x, ggml_tensor * inp_pl) {
    ggml_context * ctx = g.ctx;
    const Layer & l = g.m.layers[il];
    ggml_tensor * mine = ggml_view_2d(ctx, inp_pl, inp_pl->ne[0], inp_pl->ne[1], inp_pl->nb[1], (size_t) il * inp_pl->nb[2]);
    if (il == g.m.hp.n_layer - 1) mine = g.keep_outputs(mine);
    ggml_tensor * t = ggml_mul(ctx, ggml_gelu(ctx, ggml_mul_mat(ctx, l.per_layer_inp_gate, x)), mine);
    return g.rms_norm(ggml_mul_mat(ctx, l.per_layer_proj, t), l.per_layer_post_norm);
}

ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    ggml_tensor * x = g.embed(sqrtf((float) hp.n_embd));   // rows (an image's) are not scaled
    ggml_tensor * inp_pl = g.m.per_layer_tok_embd ? per_layer_inputs(g, x) : nullptr;
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = attention(g, il, g.rms_norm(x, l.attn_norm));
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(ctx, g.rms_norm(a, l.attn_post_norm), x);
        x = ggml_add(ctx, g.rms_norm(ffn(g, l, x), l.ffn_post_norm), x);
        if (inp_pl) x = ggml_add(ctx, x, per_layer_term(g, il, x, inp_pl));
        if (l.out_scale) x = ggml_mul(ctx, x, l.out_scale);
    }
    ggml_tensor * logits = g.output(x, g.m.output_norm);
    if (hp.final_logit_softcap > 0.0f && !g.no_outputs() && !g.embeddings) {
        const float c = hp.final_logit_softcap;
        logits = ggml_scale(ctx, ggml_tanh(ctx, ggml_scale(ctx, logits, 1.0f / c)), c);
    }
    return logits;
}

}  // namespace

// takes rows: at an image's rows the per-layer inputs read token 0's table row, not the ids; a
// non-causal image is so on the sliding-window layers only (llama.cpp's SWA_ONLY)
extern const ArchOps arch_gemma4 = {"gemma4", hparams, tensors, build, nullptr, nullptr, false, true, false, true};

}  // namespace psl
