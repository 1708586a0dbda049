// Gemma 4's MTP assistant ("gemma4-assistant", as llama.cpp b11434's
// src/models/gemma4-assistant.cpp builds it): a few Gemma-4 layers without K/V of their own that
// attend over their target's cache, the target's last window layer's for a window layer, its last
// full layer's otherwise (engine/head_assistant.cpp). One draft step:
//   x = pre_projection([target_embd(token) * sqrt(n_target); h])      h: the target's final
//       normed hidden state (step 0), else the previous step's projected state
//   per layer: q = rope(q_norm(wq attn_norm(x))), attention (scale 1) over the target's cells
//   before the draft's position, output projection, post-norm, residual; GeGLU FFN with pre-
//   and post-norms, residual; times the layer's output scale
//   logits = tok_embd · output_norm(x) (tied); the next step's h = post_projection(that normed x)
#include "models/common/arch_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    const std::vector<int64_t> swa = f.get_ints(a + ".attention.sliding_window_pattern");
    if ((int32_t) swa.size() != hp.n_layer) {
        fail(PSL_ERR_FORMAT, "'%s': sliding_window_pattern must have one entry per layer (%d), has %zu", path,
             hp.n_layer, swa.size());
    }
    hp.swa_layers.assign(swa.begin(), swa.end());
    hp.n_swa = (int32_t) f.get_int(a + ".attention.sliding_window");
    if (hp.n_swa <= 0) fail(PSL_ERR_FORMAT, "'%s': sliding window must be positive", path);
    hp.rope_freq_base_swa = (float) f.get_float(a + ".rope.freq_base_swa", 10000.0);
    hp.attn_scale = 1.0f;
    hp.head.n_embd_target = (int32_t) f.get_int(a + ".embedding_length_out");
    if (hp.head.n_embd_target <= 0 || hp.head.n_embd_target == hp.n_embd || hp.head.n_embd_target > (1 << 20)) {
        fail(PSL_ERR_FORMAT, "'%s': a Gemma 4 assistant carries the target's hidden size in embedding_length_out (got %d)",
             path, hp.head.n_embd_target);
    }
    if (hp.n_embd_head_k != hp.n_embd_head_v || hp.n_embd_head_k_swa != hp.n_embd_head_v_swa) {
        fail(PSL_ERR_FORMAT, "'%s': the Gemma 4 assistant needs equal key and value head sizes", path);
    }
}

void tensors(TensorLoader & tl, psl_model & m) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, n_t = hp.head.n_embd_target;
    create_embeddings(tl, m);   // its own token table, its output head tied to it
    m.fc = tl.matrix("nextn.pre_projection.weight", {2 * n_t, n_embd}, Place::Layer, 0);
    m.fc_post = tl.matrix("nextn.post_projection.weight", {n_embd, n_t}, Place::Output);
    ggml_tensor * rope_freqs = nullptr;   // one tensor, read by every full-attention layer
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        const int64_t hd = hp.head_k(il);
        l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
        l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, hd * hp.head_count(il)});
        l.wo = tl.layer_matrix(il, "attn_output.weight", {hd * hp.head_count(il), n_embd});
        l.q_norm = tl.layer(il, "attn_q_norm.weight", {hd});
        l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
        l.out_scale = tl.layer(il, "layer_output_scale.weight", {1});
        if (!hp.is_swa(il)) {
            if (!rope_freqs) rope_freqs = tl.create("rope_freqs.weight", {hd / 2}, Place::Layer, il);
            l.rope_freqs = rope_freqs;
        }
        l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
        l.ffn_gate = tl.layer_matrix(il, "ffn_gate.weight", {n_embd, hp.ff_length(il)});
        l.ffn_up = tl.layer_matrix(il, "ffn_up.weight", {n_embd, hp.ff_length(il)});
        l.ffn_down = tl.layer_matrix(il, "ffn_down.weight", {hp.ff_length(il), n_embd});
        l.ffn_post_norm = tl.layer(il, "post_ffw_norm.weight", {n_embd});
    }
}

// Layer il's attention over the target's cache (g.kv is the target's): its last window layer's
// cells for a window layer, else its last full layer's.
ggml_tensor * attention(Graph & g, int il, ggml_tensor * h) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.head_k(il), nh = hp.head_count(il);
    const bool swa = hp.is_swa(il);
    const float base = swa ? hp.rope_freq_base_swa : hp.rope_freq_base, scale = swa ? 1.0f : hp.rope_freq_scale;
    ggml_tensor * q = g.rms_norm(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, h), hd, nh, g.n_tokens), l.q_norm);
    q = g.rope(q, GGML_ROPE_TYPE_NEOX, base, scale, hp.rot(il), l.rope_freqs);
    const int tl = g.other->hp.n_layer - (swa ? 2 : 1);
    ggml_tensor * k_l = g.kv.k(tl), * v_l = g.kv.v(tl);
    const int64_t hkv = k_l->ne[0] / hd;
    ggml_tensor * k = ggml_view_3d(ctx, k_l, hd, g.n_kv, hkv, k_l->nb[1], ggml_row_size(k_l->type, hd), 0);
    ggml_tensor * v = ggml_view_3d(ctx, v_l, hd, g.n_kv, hkv, v_l->nb[1], ggml_row_size(v_l->type, hd), 0);
    ggml_tensor * out = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), k, v,
                                            swa ? g.inp_mask_swa : g.inp_mask, hp.attn_scale, 0.0f, 0.0f);
    ggml_prec_set_acc(out, GGML_PREC_F32);
    return ggml_mul_mat(ctx, l.wo, ggml_reshape_2d(ctx, out, hd * nh, g.n_tokens));
}

// One draft step (g.n_tokens tokens at the same position): logits, and g.hidden the next h.
ggml_tensor * build(Graph & g) {
    const HParams & hp = g.m.hp;
    ggml_context * ctx = g.ctx;
    const int64_t n_t = hp.head.n_embd_target;
    g.inp_tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, g.n_tokens);
    ggml_set_name(g.inp_tokens, "inp_tokens");
    ggml_set_input(g.inp_tokens);
    ggml_tensor * e = ggml_scale(ctx, ggml_get_rows(ctx, g.other->tok_embd, g.inp_tokens), sqrtf((float) n_t));
    ggml_tensor * x = ggml_mul_mat(ctx, g.m.fc, ggml_concat(ctx, e, head_input(g, n_t), 0));
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        ggml_tensor * a = g.rms_norm(attention(g, il, g.rms_norm(x, l.attn_norm)), l.attn_post_norm);
        x = ggml_add(ctx, a, x);
        ggml_tensor * f = g.rms_norm(g.ffn_geglu(g.rms_norm(x, l.ffn_norm), l), l.ffn_post_norm);
        x = ggml_mul(ctx, ggml_add(ctx, f, x), l.out_scale);
    }
    x = g.rms_norm(x, g.m.output_norm);
    g.hidden = ggml_mul_mat(ctx, g.m.fc_post, x);
    ggml_set_output(g.hidden);
    ggml_tensor * logits = ggml_mul_mat(ctx, g.m.output, x);
    ggml_set_output(logits);
    return logits;
}

}  // namespace

extern const ArchOps arch_gemma4_assistant = {"gemma4-assistant", hparams, tensors, build, nullptr, nullptr, true};

}  // namespace psl
