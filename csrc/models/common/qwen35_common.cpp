// The Qwen3.5 trunk and MTP block (qwen35_common.h), shared by qwen35 and qwen35moe: a hybrid of
// Gated DeltaNet linear-attention layers (three in four by default) and gated full-attention
// layers. Per layer: RMS pre-norm, the mixer, residual; post-attention RMS norm, the
// architecture's FFN, residual.
// * Linear attention: a fused q/k/v projection through a causal depthwise convolution (its last
//   d_conv - 1 inputs are state) and SiLU; q and k L2-normalised; per v head a decay
//   g = softplus(alpha + dt) * a and a write strength beta = sigmoid(.); the DeltaNet recurrence
//   (ggml_gated_delta_net) over a [d_state, d_state] state per head; RMS norm gated by SiLU(z).
// * Full attention: q and its output gate come interleaved per head from one projection; per-head
//   q/k RMS norms; M-RoPE over the first rope.dimension_count dims (text: every section at the
//   token position); attention output times sigmoid(gate).
// The first MTP (nextn) layer after the trunk: loaded here, filled by the target's graph, and
// run one draft step at a time by the MTP drafter (engine/mtp.h) through build_mtp.
#include "models/common/qwen35_common.h"
#include "models/common/mtp_common.h"

#include "memory/recurrent_state.h"

#include <algorithm>

namespace psl {

namespace {

void hparams_impl(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    HParams::Ssm & s = hp.ssm;
    s.d_conv = (int32_t) f.get_int(a + ".ssm.conv_kernel");
    s.d_inner = (int32_t) f.get_int(a + ".ssm.inner_size");
    s.d_state = (int32_t) f.get_int(a + ".ssm.state_size");
    s.n_v_heads = (int32_t) f.get_int(a + ".ssm.time_step_rank");
    s.n_k_heads = (int32_t) f.get_int(a + ".ssm.group_count");
    const bool ok = s.d_conv >= 1 && s.d_conv <= 64 && s.d_state > 0 && s.d_state <= 1024 && s.n_k_heads > 0 &&
                    s.n_v_heads > 0 && s.n_v_heads % s.n_k_heads == 0 && s.d_inner == s.d_state * s.n_v_heads;
    if (!ok) {
        fail(PSL_ERR_FORMAT, "'%s': inconsistent linear-attention hyper-parameters (conv %d, inner %d, state %d, v heads %d, k heads %d)",
             path, s.d_conv, s.d_inner, s.d_state, s.n_v_heads, s.n_k_heads);
    }
    hp.n_nextn = (int32_t) f.get_int(a + ".nextn_predict_layers", 0);
    if (hp.n_nextn < 0 || hp.n_nextn >= hp.n_layer) fail(PSL_ERR_FORMAT, "'%s': bad nextn_predict_layers %d", path, hp.n_nextn);
    const int32_t n_all = hp.n_layer;
    hp.n_layer -= hp.n_nextn;   // the trunk; MTP layers follow it
    hp.recurrent_layers.assign(hp.n_layer, false);
    const std::vector<int64_t> rec = f.get_ints(a + ".attention.recurrent_layers");
    if (!rec.empty()) {
        if ((int32_t) rec.size() != n_all) fail(PSL_ERR_FORMAT, "'%s': recurrent_layers has %zu entries, expected %d", path, rec.size(), n_all);
        for (int il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = rec[il] != 0;
    } else {
        const int64_t every = f.get_int(a + ".full_attention_interval", 4);
        if (every < 1) fail(PSL_ERR_FORMAT, "'%s': full_attention_interval must be >= 1", path);
        for (int il = 0; il < hp.n_layer; ++il) hp.recurrent_layers[il] = (il + 1) % every != 0;
    }
    const std::vector<int64_t> sec = f.get_ints(a + ".rope.dimension_sections");
    if (sec.size() > 4) fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections has %zu entries", path, sec.size());
    for (size_t i = 0; i < sec.size(); ++i) {
        if (sec[i] < 0 || sec[i] > 4096) fail(PSL_ERR_FORMAT, "'%s': bad rope section %lld", path, (long long) sec[i]);
        hp.rope_sections[i] = (int32_t) sec[i];
    }
    const int32_t sect = hp.rope_sections[0] + hp.rope_sections[1] + hp.rope_sections[2] + hp.rope_sections[3];
    if (sect <= 0 || sect > hp.n_embd_head_k) {   // M-RoPE cycles through the sections: none is no rope
        fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections must sum to 1..%d (got %d)", path, hp.n_embd_head_k, sect);
    }
    if (hp.n_embd_head_k != hp.n_embd_head_v) fail(PSL_ERR_FORMAT, "'%s': key and value head sizes differ", path);
}

// The first MTP block after the trunk, into m.layers[n_layer] (m.mtp_layer); a file that
// announces nextn layers without their tensors just has no MTP.
void load_mtp_layer(TensorLoader & tl, psl_model & m, const Qwen35Ffn & ffn) {
    const HParams & hp = m.hp;
    const int il = hp.n_layer;   // the first block after the trunk
    const int64_t n_embd = hp.n_embd, hd = hp.n_embd_head_k;
    m.layers.resize((size_t) il + 1);
    Layer & l = m.layers[il];
    l.nextn_eh_proj = tl.layer_matrix(il, "nextn.eh_proj.weight", {2 * n_embd, n_embd}, false);
    if (!l.nextn_eh_proj) return;   // announced but not shipped (a converter dropped them)
    l.nextn_enorm = tl.layer(il, "nextn.enorm.weight", {n_embd});
    l.nextn_hnorm = tl.layer(il, "nextn.hnorm.weight", {n_embd});
    l.nextn_embed = tl.layer(il, "nextn.embed_tokens.weight", {n_embd, hp.n_vocab}, false);
    l.nextn_head_norm = tl.layer(il, "nextn.shared_head_norm.weight", {n_embd}, false);
    l.nextn_head = tl.layer_matrix(il, "nextn.shared_head_head.weight", {n_embd, hp.n_vocab}, false);
    l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
    l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
    l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, 2 * hd * hp.n_head});
    l.wk = tl.layer_matrix(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()});
    l.wv = tl.layer_matrix(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()});
    l.wo = tl.layer_matrix(il, "attn_output.weight", {hd * hp.n_head, n_embd});
    l.q_norm = tl.layer(il, "attn_q_norm.weight", {hd});
    l.k_norm = tl.layer(il, "attn_k_norm.weight", {hd});
    ffn.tensors(tl, m, il);
    m.mtp_layer = il;
}

void tensors_impl(TensorLoader & tl, psl_model & m, const Qwen35Ffn & ffn) {
    const HParams & hp = m.hp;
    const HParams::Ssm & s = hp.ssm;
    const int64_t n_embd = hp.n_embd;
    create_embeddings(tl, m);
    for (int il = 0; il < hp.n_layer; ++il) {
        Layer & l = m.layers[il];
        l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
        l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
        if (hp.is_recurrent(il)) {
            const int64_t key_dim = (int64_t) s.d_state * s.n_k_heads;
            l.wqkv = tl.layer_matrix(il, "attn_qkv.weight", {n_embd, 2 * key_dim + s.d_inner});
            l.wqkv_gate = tl.layer_matrix(il, "attn_gate.weight", {n_embd, s.d_inner});
            l.ssm_conv1d = tl.layer(il, "ssm_conv1d.weight", {s.d_conv, s.conv_channels()});
            l.ssm_dt = tl.layer(il, "ssm_dt.bias", {s.n_v_heads});
            l.ssm_a = tl.layer(il, "ssm_a", {s.n_v_heads});
            l.ssm_beta = tl.layer_matrix(il, "ssm_beta.weight", {n_embd, s.n_v_heads});
            l.ssm_alpha = tl.layer_matrix(il, "ssm_alpha.weight", {n_embd, s.n_v_heads});
            l.ssm_norm = tl.layer(il, "ssm_norm.weight", {s.d_state});
            l.ssm_out = tl.layer_matrix(il, "ssm_out.weight", {s.d_inner, n_embd});
        } else {
            const int64_t hd = hp.n_embd_head_k;
            l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, 2 * hd * hp.n_head});   // q and gate
            l.wk = tl.layer_matrix(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()});
            l.wv = tl.layer_matrix(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()});
            l.wo = tl.layer_matrix(il, "attn_output.weight", {hd * hp.n_head, n_embd});
            l.q_norm = tl.layer(il, "attn_q_norm.weight", {hd});
            l.k_norm = tl.layer(il, "attn_k_norm.weight", {hd});
        }
        ffn.tensors(tl, m, il);
    }
    if (hp.n_nextn > 0) load_mtp_layer(tl, m, ffn);
}

ggml_tensor * input(Graph & g, ggml_type type, int64_t n, const char * name) {
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, type, n);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

// L2 normalisation of each row as llama.cpp computes it (an RMS norm rescaled), so that the
// epsilon acts the same.
ggml_tensor * l2_norm(ggml_context * ctx, ggml_tensor * x, float eps) {
    const float n = (float) x->ne[0];
    return ggml_scale(ctx, ggml_rms_norm(ctx, x, eps / n), 1.0f / sqrtf(n));
}

ggml_tensor * gated_attention(Graph & g, int il, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.n_embd_head_k, n = g.n_tokens;
    if (!g.inp_pos4) g.inp_pos4 = input(g, GGML_TYPE_I32, 4 * n, "inp_pos4");

    ggml_tensor * qg = ggml_mul_mat(ctx, l.wq, x);   // per head: hd of q, then hd of gate
    const size_t es = ggml_element_size(qg);
    ggml_tensor * q = ggml_view_3d(ctx, qg, hd, hp.n_head, n, 2 * hd * es, 2 * hd * hp.n_head * es, 0);
    ggml_tensor * gate = ggml_view_3d(ctx, qg, hd, hp.n_head, n, 2 * hd * es, 2 * hd * hp.n_head * es, hd * es);
    gate = ggml_cont_2d(ctx, gate, hd * hp.n_head, n);
    q = g.rms_norm(q, l.q_norm);
    ggml_tensor * k = g.rms_norm(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wk, x), hd, hp.n_head_kv, n), l.k_norm);
    ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wv, x), hd, hp.n_head_kv, n);
    int sections[4];
    std::copy(hp.rope_sections, hp.rope_sections + 4, sections);
    auto rope = [&](ggml_tensor * t) {
        return ggml_rope_multi(ctx, t, g.inp_pos4, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_IMROPE, hp.n_ctx_train,
                               hp.rope_freq_base, hp.rope_freq_scale, 0.0f, 1.0f, 32.0f, 1.0f);
    };
    ggml_tensor * attn = g.attention(il, rope(q), rope(k), v, 1.0f / sqrtf((float) hd));
    attn = ggml_mul(ctx, attn, ggml_sigmoid(ctx, gate));
    return ggml_mul_mat(ctx, l.wo, attn);
}

ggml_tensor * linear_attention(Graph & g, int il, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const HParams::Ssm & s = hp.ssm;
    const Layer & l = g.m.layers[il];
    RecurrentState & rs = *g.rs;
    const int64_t n = g.n_tokens, S = s.d_state, Hk = s.n_k_heads, Hv = s.n_v_heads;
    const int64_t ch = s.conv_channels(), key_dim = S * Hk, kg = rs.n_written((int32_t) n);
    if (!g.inp_rs_src) {
        g.inp_rs_src = input(g, GGML_TYPE_I32, 1, "inp_rs_src");
        g.inp_rs_dst = input(g, GGML_TYPE_I64, kg, "inp_rs_dst");
        g.inp_rs_dst_old = input(g, GGML_TYPE_I64, kg, "inp_rs_dst_old");
    }

    ggml_tensor * qkv = ggml_mul_mat(ctx, l.wqkv, x);        // [ch, n]
    ggml_tensor * z = ggml_mul_mat(ctx, l.wqkv_gate, x);     // [d_inner, n]
    ggml_tensor * beta = ggml_sigmoid(ctx, ggml_reshape_4d(ctx, ggml_mul_mat(ctx, l.ssm_beta, x), 1, Hv, n, 1));
    ggml_tensor * alpha = ggml_mul_mat(ctx, l.ssm_alpha, x); // [Hv, n]
    ggml_tensor * decay = ggml_mul(ctx, ggml_softplus(ctx, ggml_add(ctx, alpha, l.ssm_dt)), l.ssm_a);
    decay = ggml_reshape_4d(ctx, decay, 1, Hv, n, 1);

    // Convolution over [previous d_conv - 1 inputs, this batch], time-major: the state after
    // token t is then the contiguous run of inputs t + 1 .. t + d_conv - 1.
    ggml_tensor * conv_all = rs.conv(il);
    ggml_tensor * prev = ggml_reshape_2d(ctx, ggml_get_rows(ctx, conv_all, g.inp_rs_src), ch, s.d_conv - 1);
    ggml_tensor * xt = ggml_concat(ctx, prev, qkv, 1);       // [ch, d_conv - 1 + n]
    const size_t col = ggml_row_size(GGML_TYPE_F32, ch);
    for (int64_t j = 0; j < kg; ++j) {   // windows overlap, so one view (and one write) each
        ggml_tensor * w = ggml_view_2d(ctx, xt, s.conv_row(), 1, s.conv_row() * sizeof(float), (size_t) (n - kg + 1 + j) * col);
        ggml_tensor * row = ggml_view_1d(ctx, g.inp_rs_dst_old, 1, (size_t) j * sizeof(int64_t));
        ggml_build_forward_expand(g.gf, ggml_set_rows(ctx, conv_all, w, row));
    }
    ggml_tensor * conv_in = ggml_reshape_3d(ctx, ggml_cont(ctx, ggml_transpose(ctx, xt)), s.d_conv - 1 + n, ch, 1);
    ggml_tensor * conv = ggml_silu(ctx, ggml_ssm_conv(ctx, conv_in, l.ssm_conv1d));   // [ch, n, 1]

    const size_t es = ggml_element_size(conv), row = conv->nb[1];
    ggml_tensor * q = ggml_view_4d(ctx, conv, S, Hk, n, 1, S * es, row, row * n, 0);
    ggml_tensor * k = ggml_view_4d(ctx, conv, S, Hk, n, 1, S * es, row, row * n, key_dim * es);
    ggml_tensor * v = ggml_view_4d(ctx, conv, S, Hv, n, 1, S * es, row, row * n, 2 * key_dim * es);
    q = l2_norm(ctx, q, hp.norm_eps);
    k = l2_norm(ctx, k, hp.norm_eps);

    ggml_tensor * ssm_all = rs.ssm(il);
    ggml_tensor * s0 = ggml_reshape_4d(ctx, ggml_get_rows(ctx, ssm_all, g.inp_rs_src), S, S, Hv, 1);
    // output: the attention [S, Hv, n], then the states after the last kg tokens, newest first
    ggml_tensor * out = ggml_gated_delta_net(ctx, q, k, v, decay, beta, s0, kg);
    const size_t fe = ggml_element_size(out);
    ggml_tensor * states = ggml_view_2d(ctx, out, s.state_row(), kg, s.state_row() * fe, (size_t) (S * Hv * n) * fe);
    ggml_build_forward_expand(g.gf, ggml_set_rows(ctx, ssm_all, states, g.inp_rs_dst));
    ggml_tensor * o = ggml_view_4d(ctx, out, S, Hv, n, 1, S * fe, S * Hv * fe, S * Hv * n * fe, 0);

    o = ggml_mul(ctx, g.rms_norm(o, l.ssm_norm), ggml_silu(ctx, ggml_reshape_4d(ctx, z, S, Hv, n, 1)));
    return ggml_mul_mat(ctx, l.ssm_out, ggml_reshape_2d(ctx, o, s.d_inner, n));
}

// The token embeddings the block reads: its own table when the file has one; at an image's rows
// the rows themselves, as llama.cpp's graph_mtp takes an embeddings batch's.
ggml_tensor * mtp_embed(Graph & g, ggml_tensor * embd) {
    const Layer & l = g.m.layers[g.m.mtp_layer];
    return l.nextn_embed && !g.rows_input ? ggml_get_rows(g.ctx, l.nextn_embed, g.inp_tokens) : embd;
}

// The block up to its residual stream's output; attn_only stops after the cache write.
ggml_tensor * mtp_block(Graph & g, ggml_tensor * e, ggml_tensor * h, bool attn_only, const Qwen35Ffn & ffn) {
    ggml_context * ctx = g.ctx;
    const int il = g.m.mtp_layer;
    const Layer & l = g.m.layers[il];
    ggml_tensor * eh = ggml_concat(ctx, g.rms_norm(e, l.nextn_enorm), g.rms_norm(h, l.nextn_hnorm), 0);
    ggml_tensor * y = ggml_mul_mat(ctx, l.nextn_eh_proj, eh);
    ggml_tensor * a = gated_attention(g, il, g.rms_norm(y, l.attn_norm));
    if (attn_only) return a;   // the K/V writes are already in the graph
    y = ggml_add(ctx, y, a);
    return ggml_add(ctx, y, ffn.build(g, l, g.rms_norm(y, l.attn_post_norm)));
}

// In the target's graph: x is the trunk output (all rows), embd the token embeddings; keeps the
// normed hidden rows (g.mtp_hidden) and writes the MTP block's K/V for this batch.
void mtp_fill(Graph & g, ggml_tensor * embd, ggml_tensor * x, const Qwen35Ffn & ffn) {
    mtp_block(g, mtp_embed(g, embd), mtp_prev_hidden(g, x), true, ffn);
}

// MTP draft nodes (engine/mtp.h): the block over their tokens, each with the hidden row given as
// its input (g.inp_mtp_h), their output rows kept (g.mtp_hidden) for their children; logits
// [n_vocab, n_tokens].
ggml_tensor * build_mtp_impl(Graph & g, const Qwen35Ffn & ffn) {
    return mtp_head(g, mtp_block(g, mtp_embed(g, g.embed()), mtp_draft_input(g), false, ffn));
}

ggml_tensor * build_impl(Graph & g, const Qwen35Ffn & ffn) {
    const HParams & hp = g.m.hp;
    if (!g.rs) fail(PSL_ERR_INTERNAL, "qwen35 graph without a recurrent state");
    ggml_context * ctx = g.ctx;
    ggml_tensor * x = g.embed();
    ggml_tensor * embd = x;
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * h = g.rms_norm(x, l.attn_norm);
        ggml_tensor * a = hp.is_recurrent(il) ? linear_attention(g, il, h) : gated_attention(g, il, h);
        if (il == hp.n_layer - 1 && !g.mtp) {   // only the rows that produce logits go on (MTP needs all)
            a = g.keep_outputs(a);
            x = g.keep_outputs(x);
        }
        x = ggml_add(ctx, x, a);
        x = ggml_add(ctx, x, ffn.build(g, l, g.rms_norm(x, l.attn_post_norm)));
    }
    if (g.mtp) mtp_fill(g, embd, x, ffn);
    return g.output(x, g.m.output_norm);
}

}  // namespace

void load_qwen35_hparams(const GgufFile & f, const std::string & a, HParams & hp) { hparams_impl(f, a, hp); }

void create_qwen35_tensors(TensorLoader & tl, psl_model & m, const Qwen35Ffn & ffn) { tensors_impl(tl, m, ffn); }

ggml_tensor * build_qwen35(Graph & g, const Qwen35Ffn & ffn) { return build_impl(g, ffn); }

ggml_tensor * build_qwen35_mtp(Graph & g, const Qwen35Ffn & ffn) { return build_mtp_impl(g, ffn); }

}  // namespace psl
