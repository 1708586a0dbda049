// EAGLE-3 draft head ("eagle3", as llama.cpp's src/models/eagle3.cpp reads it): no eval of its
// own; it drafts for a target from the inputs of three of the target's layers (engine/head.h).
// * encoder: the three rows concatenated, RMS-normed when norm_before_fc, times fc: g [n_embd];
// * decoder, one layer: at position P it takes the token at P + 1 and g of position P; the
//   attention reads [attn_norm(embed(token)); attn_norm_2(g)] (2 n_embd wide, NORM rope with
//   the optional llama3 frequency factors), its residual is g (normed g with
//   norm_before_residual); then an RMS-normed SwiGLU FFN and its residual. The result before
//   the output norm is the next step's g; the output head gives logits over the draft
//   vocabulary, which d2t maps to target ids. A head without token_embd / output uses the
//   target's.
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    load_head_layers(f, a, hp);
    if (hp.head.target_layers.size() != 3) {
        fail(PSL_ERR_FORMAT, "'%s': an EAGLE-3 head reads exactly 3 target layers, the file names %zu", path,
             hp.head.target_layers.size());
    }
    hp.head.n_embd_target = (int32_t) f.get_int(a + ".target_hidden_size");
    if (hp.head.n_embd_target <= 0 || hp.head.n_embd_target > (1 << 20)) {
        fail(PSL_ERR_FORMAT, "'%s': bad target_hidden_size %d", path, hp.head.n_embd_target);
    }
    hp.head.norm_before_residual = f.get_int(a + ".norm_before_residual", 0) != 0;
    hp.head.norm_before_fc = f.get_int(a + ".norm_before_fc", 0) != 0;
    if (hp.n_layer != 1) fail(PSL_ERR_FORMAT, "'%s': an EAGLE-3 head has one decoder layer, the file says %d", path, hp.n_layer);
    if (hp.n_embd_head_k != hp.n_embd_head_v) fail(PSL_ERR_FORMAT, "'%s': EAGLE-3 needs equal key and value head sizes", path);
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    load_d2t(m);
    const int64_t n_embd = hp.n_embd;
    const int64_t n_inp = (int64_t) hp.head.target_layers.size() * hp.head.n_embd_target;
    m.fc = tl.matrix("fc.weight", {n_inp, n_embd}, Place::Layer, 0);
    if (hp.head.norm_before_fc) m.enc_norm = tl.create("enc.output_norm.weight", {n_inp}, Place::Layer, 0);
    m.tok_embd = tl.create("token_embd.weight", {n_embd, hp.n_vocab}, Place::Input, -1, /*required =*/ false);
    m.output_norm = tl.create("output_norm.weight", {n_embd}, Place::Output);
    m.output = tl.matrix("output.weight", {n_embd, head_vocab(m)}, Place::Output, -1, /*required =*/ false);
    Layer & l = m.layers[0];
    const int64_t n_q = (int64_t) hp.n_embd_head_k * hp.n_head;
    l.attn_norm = tl.layer(0, "attn_norm.weight", {n_embd});
    l.attn_norm_2 = tl.layer(0, "attn_norm_2.weight", {n_embd});
    l.wq = tl.layer_matrix(0, "attn_q.weight", {2 * n_embd, n_q});
    l.wk = tl.layer_matrix(0, "attn_k.weight", {2 * n_embd, hp.n_embd_k_gqa()});
    l.wv = tl.layer_matrix(0, "attn_v.weight", {2 * n_embd, hp.n_embd_v_gqa()});
    l.wo = tl.layer_matrix(0, "attn_output.weight", {n_q, n_embd});
    create_ffn(tl, m, 0);
    l.rope_freqs = tl.create("rope_freqs.weight", {hp.n_rot / 2}, Place::Layer, 0, /*required =*/ false);
}

ggml_tensor * rope(const Graph & g, ggml_tensor * x) {
    const HParams & hp = g.m.hp;
    const int n_ctx_orig = hp.n_ctx_orig_yarn > 0 ? hp.n_ctx_orig_yarn : hp.n_ctx_train;
    return ggml_rope_ext(g.ctx, x, g.inp_pos, g.m.layers[0].rope_freqs, hp.n_rot, GGML_ROPE_TYPE_NORMAL, n_ctx_orig,
                         hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor,
                         hp.yarn_beta_fast, hp.yarn_beta_slow);
}

// The decoder over n_tokens (token, g) pairs: their K/V into the cache; unless no_outputs,
// the last row's pre-norm state (g.hidden) and logits over the draft vocabulary.
ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    const Layer & l = g.m.layers[0];
    const int64_t hd = hp.n_embd_head_k, n = g.n_tokens;
    ggml_tensor * emb = head_tokens(g);
    ggml_tensor * gin = head_input(g, hp.n_embd);
    ggml_tensor * gn = g.rms_norm(gin, l.attn_norm_2);
    ggml_tensor * resid = hp.head.norm_before_residual ? gn : gin;
    ggml_tensor * cur = ggml_concat(ctx, g.rms_norm(emb, l.attn_norm), gn, 0);
    ggml_tensor * q = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, cur), hd, hp.n_head, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wk, cur), hd, hp.n_head_kv, n);
    ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wv, cur), hd, hp.n_head_kv, n);
    ggml_tensor * attn = g.attention(0, rope(g, q), rope(g, k), v, 1.0f / sqrtf((float) hd));
    if (g.no_outputs()) return attn;   // the cache entries are all that was asked
    attn = g.keep_outputs(attn);
    ggml_tensor * x = ggml_add(ctx, ggml_mul_mat(ctx, l.wo, attn), g.keep_outputs(resid));
    x = ggml_add(ctx, x, g.ffn_swiglu(g.rms_norm(x, l.ffn_norm), l));
    g.hidden = x;
    ggml_set_output(x);
    ggml_tensor * logits = ggml_mul_mat(ctx, head_output(g), g.rms_norm(x, g.m.output_norm));
    ggml_set_output(logits);
    return logits;
}

// The encoder: the target's features [3 n_embd_target, n_tokens] -> g [n_embd, n_tokens].
ggml_tensor * build_encode(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = head_input(g, (int64_t) hp.head.target_layers.size() * hp.head.n_embd_target);
    if (g.m.enc_norm) x = g.rms_norm(x, g.m.enc_norm);
    x = ggml_mul_mat(g.ctx, g.m.fc, x);
    ggml_set_output(x);
    return x;
}

}  // namespace

extern const ArchOps arch_eagle3 = {"eagle3", hparams, tensors, build, nullptr, build_encode};

}  // namespace psl
