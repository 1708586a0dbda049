#include "models/common/graph_common.h"

#include "error.h"

#include "kernels/attention_rows.h"
#include "memory/recurrent_state.h"

#include <algorithm>
#include <cmath>

namespace psl {

Graph::Graph(ggml_context * ctx, ggml_cgraph * gf, const psl_model & m, KvCache & kv, int32_t n_tokens,
             int32_t n_kv, Outputs outputs, int32_t n_out_rows, int32_t fa_rows)
    : ctx(ctx), gf(gf), m(m), kv(kv), n_tokens(n_tokens), n_kv(n_kv), outputs(outputs), n_out_rows(n_out_rows),
      fa_rows(fa_rows) {
    const int64_t mask_rows = fa_rows == FA_ROW_ALONE ? 2 : n_tokens;
    inp_pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
    ggml_set_name(inp_pos, "inp_pos");
    ggml_set_input(inp_pos);
    inp_kv_idx = ggml_new_tensor_1d(ctx, GGML_TYPE_I64, n_tokens);
    ggml_set_name(inp_kv_idx, "inp_kv_idx");
    ggml_set_input(inp_kv_idx);
    inp_mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, mask_rows);
    ggml_set_name(inp_mask, "inp_mask");
    ggml_set_input(inp_mask);
    if (m.hp.n_swa > 0) {
        inp_mask_swa = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, n_kv, mask_rows);
        ggml_set_name(inp_mask_swa, "inp_mask_swa");
        ggml_set_input(inp_mask_swa);
    }
    if (outputs == Outputs::Rows) {
        inp_out_ids = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_out_rows);
        ggml_set_name(inp_out_ids, "inp_out_ids");
        ggml_set_input(inp_out_ids);
    }
}

ggml_tensor * Graph::embed(float tok_scale) {
    if (rows_input) {
        inp_rows = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, m.hp.n_embd_inp(), n_tokens);
        ggml_set_name(inp_rows, "inp_rows");
        ggml_set_input(inp_rows);
        // deepstack rows: the embedding is the first n_embd of each (llama.cpp's view too)
        if (m.hp.n_deepstack == 0) return inp_rows;
        return ggml_view_2d(ctx, inp_rows, m.hp.n_embd, n_tokens, inp_rows->nb[1], 0);
    }
    inp_tokens = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n_tokens);
    ggml_set_name(inp_tokens, "inp_tokens");
    ggml_set_input(inp_tokens);
    ggml_tensor * x = ggml_get_rows(ctx, m.tok_embd, inp_tokens);
    return tok_scale == 1.0f ? x : ggml_scale(ctx, x, tok_scale);
}

ggml_tensor * Graph::deepstack(int il) const {
    if (!inp_rows || il >= m.hp.n_deepstack) return nullptr;
    const size_t es = ggml_element_size(inp_rows);
    return ggml_view_2d(ctx, inp_rows, m.hp.n_embd, n_tokens, inp_rows->nb[1], (size_t) (il + 1) * m.hp.n_embd * es);
}

void Graph::layer_input(int il, ggml_tensor * x) {
    if (!capture) return;
    captured.resize(capture->size(), nullptr);
    for (size_t k = 0; k < capture->size(); ++k) {
        if ((*capture)[k] != il) continue;
        ggml_set_output(x);   // kept after the compute, for the head to read
        captured[k] = x;
    }
}

ggml_tensor * Graph::rms_norm(ggml_tensor * x, ggml_tensor * w) const {
    return ggml_mul(ctx, ggml_rms_norm(ctx, x, m.hp.norm_eps), w);
}

ggml_tensor * Graph::rope(ggml_tensor * x, int mode, float freq_base, float freq_scale, int n_rot,
                          ggml_tensor * factors) const {
    const HParams & hp = m.hp;
    const int n_ctx_orig = hp.n_ctx_orig_yarn > 0 ? hp.n_ctx_orig_yarn : hp.n_ctx_train;
    if (mode == GGML_ROPE_TYPE_MROPE || mode == GGML_ROPE_TYPE_IMROPE) {   // the file's sections over inp_pos4
        if (!inp_pos4) fail(PSL_ERR_INTERNAL, "M-RoPE without its positions (inp_pos4)");
        int sections[GGML_MROPE_SECTIONS];
        std::copy(hp.rope_sections, hp.rope_sections + GGML_MROPE_SECTIONS, sections);
        return ggml_rope_multi(ctx, x, inp_pos4, factors, n_rot > 0 ? n_rot : hp.n_rot, sections, mode, n_ctx_orig,
                               freq_base, freq_scale, hp.rope_ext_factor, hp.rope_attn_factor, hp.yarn_beta_fast,
                               hp.yarn_beta_slow);
    }
    return ggml_rope_ext(ctx, x, inp_pos, factors, n_rot > 0 ? n_rot : hp.n_rot, mode, n_ctx_orig, freq_base,
                         freq_scale, hp.rope_ext_factor, hp.rope_attn_factor, hp.yarn_beta_fast, hp.yarn_beta_slow);
}

void Graph::store_kv(int il, ggml_tensor * k_cur, ggml_tensor * v_cur) {
    ggml_tensor * k_l = kv.k(il);
    ggml_tensor * v_l = kv.v(il);
    // Write this batch's keys and values to the cells named by an input, so that the graph does
    // not depend on n_past and can be reused for the next token.
    if (k_cur) ggml_build_forward_expand(gf, ggml_set_rows(ctx, k_l, ggml_reshape_2d(ctx, k_cur, k_l->ne[0], n_tokens), inp_kv_idx));
    if (v_cur && v_l) ggml_build_forward_expand(gf, ggml_set_rows(ctx, v_l, ggml_reshape_2d(ctx, v_cur, v_l->ne[0], n_tokens), inp_kv_idx));
}

ggml_tensor * Graph::attention_heads(int il, ggml_tensor * q, ggml_tensor * k_cur, ggml_tensor * v_cur, float scale,
                                     int64_t dv_latent) {
    ggml_tensor * k_l = kv.k(il);
    ggml_tensor * v_l = kv.v(il);
    const int64_t dk = q->ne[0], hkv = k_l->ne[0] / dk;
    const size_t k_row = k_l->nb[1];
    store_kv(il, k_cur, v_cur);

    // Attend over the first n_kv cells; the mask hides the future and the unused cells.
    ggml_tensor * k = ggml_view_3d(ctx, k_l, dk, n_kv, hkv, k_row, ggml_row_size(k_l->type, dk), 0);
    ggml_tensor * v = v_l ? ggml_view_3d(ctx, v_l, v_l->ne[0] / hkv, n_kv, hkv, v_l->nb[1],
                                         ggml_row_size(v_l->type, v_l->ne[0] / hkv), 0)
                          : ggml_view_3d(ctx, k_l, dv_latent, n_kv, hkv, k_row, ggml_row_size(k_l->type, dk), 0);
    q = ggml_permute(ctx, q, 0, 2, 1, 3);
    ggml_tensor * mask = m.hp.is_swa(il) ? inp_mask_swa : inp_mask;
    if (fa_rows == FA_ROW_ALONE) {   // [dk, 1, n_head] padded with a row of zeros, which sees no cell
        ggml_tensor * out = flash_attention(il, ggml_pad(ctx, q, 0, 1, 0, 0), k, v, mask, scale);
        return ggml_view_3d(ctx, out, out->ne[0], out->ne[1], 1, out->nb[1], out->nb[2], 0);
    }
    if (fa_rows <= 0 || n_tokens <= fa_rows) return flash_attention(il, q, k, v, mask, scale);
    // Query rows are independent: attend in chunks of fa_rows and join them
    ggml_tensor * out = nullptr;
    for (int64_t r0 = 0; r0 < n_tokens; r0 += fa_rows) {
        const int64_t nr = std::min<int64_t>(fa_rows, n_tokens - r0);
        ggml_tensor * qc = ggml_view_3d(ctx, q, q->ne[0], nr, q->ne[2], q->nb[1], q->nb[2], r0 * q->nb[1]);
        ggml_tensor * mc = ggml_view_2d(ctx, mask, mask->ne[0], nr, mask->nb[1], r0 * mask->nb[1]);
        ggml_tensor * oc = flash_attention(il, qc, k, v, mc, scale);
        out = out ? ggml_concat(ctx, out, oc, 2) : oc;
    }
    return out;
}

ggml_tensor * Graph::flash_attention(int il, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                                     float scale) {
    // a few rows on the CPU: ours, which reads each K/V row once for all of them (kernels/)
    if (cpu_kernels && !m.layers[il].attn_sinks && attention_rows_fit(q, k, v, mask)) {
        return attention_rows(ctx, q, k, v, mask, &op_floats.emplace_back(scale));
    }
    ggml_tensor * out = ggml_flash_attn_ext(ctx, q, k, v, mask, scale, 0.0f, 0.0f);
    ggml_prec_set_acc(out, GGML_PREC_F32);   // accumulate in F32, as llama.cpp asks
    // gpt-oss: one learned logit per head joins every softmax (and takes its share of the mass)
    if (m.layers[il].attn_sinks) ggml_flash_attn_ext_add_sinks(out, m.layers[il].attn_sinks);
    return out;   // [dv, n_head, n_rows]
}

ggml_tensor * Graph::attention(int il, ggml_tensor * q, ggml_tensor * k_cur, ggml_tensor * v_cur, float scale) {
    ggml_tensor * out = attention_heads(il, q, k_cur, v_cur, scale);
    return ggml_reshape_2d(ctx, out, out->ne[0] * out->ne[1], n_tokens);
}

ggml_tensor * Graph::self_attention(int il, ggml_tensor * h, const AttnOpts & o) {
    const HParams & hp = m.hp;
    const Layer & l = m.layers[il];
    ggml_tensor * q = ggml_mul_mat(ctx, l.wq, h);
    ggml_tensor * k = ggml_mul_mat(ctx, l.wk, h);
    ggml_tensor * v = ggml_mul_mat(ctx, l.wv, h);
    if (l.bq) q = ggml_add(ctx, q, l.bq);
    if (l.bk) k = ggml_add(ctx, k, l.bk);
    if (l.bv) v = ggml_add(ctx, v, l.bv);
    q = ggml_reshape_3d(ctx, q, hp.n_embd_head_k, hp.n_head, n_tokens);
    k = ggml_reshape_3d(ctx, k, hp.n_embd_head_k, hp.n_head_kv, n_tokens);
    v = ggml_reshape_3d(ctx, v, hp.n_embd_head_v, hp.n_head_kv, n_tokens);
    if (l.q_norm) q = rms_norm(q, l.q_norm);   // over each head's vector (ne0)
    if (l.k_norm) k = rms_norm(k, l.k_norm);
    q = rope(q, o.rope_mode, o.freq_base, o.freq_scale, 0, o.rope_factors);
    k = rope(k, o.rope_mode, o.freq_base, o.freq_scale, 0, o.rope_factors);
    if (o.q_scale != 1.0f) q = ggml_scale(ctx, q, o.q_scale);
    if (m.hp.attn_temp_scale != 0.0f) q = attn_temperature(q);
    ggml_tensor * attn = attention(il, q, k, v, o.kq_scale);
    if (il == hp.n_layer - 1) attn = keep_outputs(attn);   // only the rows that produce logits go on
    ggml_tensor * out = ggml_mul_mat(ctx, l.wo, attn);
    return l.bo ? ggml_add(ctx, out, l.bo) : out;
}

ggml_tensor * Graph::attn_temperature(ggml_tensor * q) {
    if (!inp_attn_scale) {
        inp_attn_scale = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 1, 1, n_tokens);
        ggml_set_name(inp_attn_scale, "inp_attn_scale");
        ggml_set_input(inp_attn_scale);
    }
    return ggml_mul(ctx, q, inp_attn_scale);
}

ggml_tensor * Graph::ffn_swiglu(ggml_tensor * x, const Layer & l) const {
    ggml_tensor * u = ggml_mul_mat(ctx, l.ffn_up, x);
    if (l.ffn_up_b) u = ggml_add(ctx, u, l.ffn_up_b);
    ggml_tensor * g = ggml_mul_mat(ctx, l.ffn_gate, x);
    if (l.ffn_gate_b) g = ggml_add(ctx, g, l.ffn_gate_b);
    ggml_tensor * d = ggml_mul_mat(ctx, l.ffn_down, ggml_swiglu_split(ctx, g, u));
    return l.ffn_down_b ? ggml_add(ctx, d, l.ffn_down_b) : d;
}

ggml_tensor * Graph::ffn_geglu(ggml_tensor * x, const Layer & l) const {
    ggml_tensor * g = ggml_mul_mat(ctx, l.ffn_gate, x);
    ggml_tensor * u = ggml_mul_mat(ctx, l.ffn_up, x);
    return ggml_mul_mat(ctx, l.ffn_down, ggml_geglu_split(ctx, g, u));
}

// The top-k experts of each token: selection scores (plus the selection bias), limited to the
// best expert groups when the model has them; returns (selected ids [k, n_tok], weights
// [1, k, n_tok]).
std::pair<ggml_tensor *, ggml_tensor *> Graph::moe_route(ggml_tensor * logits, const Layer & l, const MoeOpts & o) const {
    const HParams & hp = m.hp;
    const int64_t n_exp = hp.n_expert, k = hp.n_expert_used, n_tok = logits->ne[1];
    ggml_tensor * probs = o.gating == MoeGating::SoftmaxAll ? ggml_soft_max(ctx, logits)
                          : o.gating == MoeGating::Sigmoid  ? ggml_sigmoid(ctx, logits)
                                                            : logits;
    // DeepSeek V3's selection bias moves which experts are picked, not their weights
    ggml_tensor * sel_probs = l.ffn_exp_probs_b ? ggml_add(ctx, probs, l.ffn_exp_probs_b) : probs;
    if (hp.n_expert_groups > 1 && n_tok > 0) {
        // groups scored by the sum of their two best experts; the others' experts masked out
        const int64_t per = n_exp / hp.n_expert_groups, n_g = hp.n_expert_groups;
        ggml_tensor * groups = ggml_reshape_3d(ctx, sel_probs, per, n_g, n_tok);
        ggml_tensor * top2 = ggml_argsort_top_k(ctx, groups, 2);
        ggml_tensor * score = ggml_get_rows(ctx, ggml_reshape_4d(ctx, groups, 1, per, n_g, n_tok), top2);
        score = ggml_reshape_2d(ctx, ggml_sum_rows(ctx, ggml_reshape_3d(ctx, score, 2, n_g, n_tok)), n_g, n_tok);
        ggml_tensor * keep = ggml_argsort_top_k(ctx, score, hp.n_group_used);
        ggml_tensor * kept = ggml_get_rows(ctx, groups, keep);
        sel_probs = ggml_reshape_2d(ctx, ggml_set_rows(ctx, ggml_fill(ctx, groups, -INFINITY), kept, keep), n_exp, n_tok);
    }
    ggml_tensor * sel = ggml_argsort_top_k(ctx, sel_probs, (int) k);   // I32 [k, n_tok]
    ggml_tensor * w = ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, n_exp, n_tok), sel);   // [1, k, n_tok]
    if (o.gating == MoeGating::SoftmaxSelected) {
        w = ggml_reshape_3d(ctx, ggml_soft_max(ctx, ggml_reshape_2d(ctx, w, k, n_tok)), 1, k, n_tok);
    }
    if (o.norm) {
        ggml_tensor * w2 = ggml_reshape_2d(ctx, w, k, n_tok);
        // llama.cpp's guard against a zero sum: the smallest normal F16
        ggml_tensor * sum = ggml_clamp(ctx, ggml_sum_rows(ctx, w2), 6.103515625e-5f, INFINITY);
        w = ggml_reshape_3d(ctx, ggml_div(ctx, w2, sum), 1, k, n_tok);
    }
    if (o.scale != 0.0f && o.scale != 1.0f) w = ggml_scale(ctx, w, o.scale);
    return {sel, w};
}

ggml_tensor * Graph::ffn_moe(ggml_tensor * x, const Layer & l, MoeGating gating, MoeAct act) const {
    return ffn_moe(x, l, MoeOpts{gating, act, m.hp.expert_weights_norm, m.hp.expert_weights_scale});
}

ggml_tensor * Graph::ffn_moe(ggml_tensor * x, const Layer & l, const MoeOpts & o) const {
    const int64_t n_embd = x->ne[0], n_tok = x->ne[1], k = m.hp.n_expert_used;
    ggml_tensor * logits = o.logits;
    if (!logits) {
        logits = ggml_mul_mat(ctx, l.ffn_gate_inp, x);   // [n_expert, n_tok]
        if (l.ffn_gate_inp_b) logits = ggml_add(ctx, logits, l.ffn_gate_inp_b);
    }
    auto [sel, w] = moe_route(logits, l, o);

    ggml_tensor * cur = ggml_reshape_3d(ctx, x, n_embd, 1, n_tok);
    ggml_tensor * up = nullptr, * gate = nullptr;
    if (l.ffn_gate_up_exps) {   // one matrix for both, gate rows first
        ggml_tensor * gu = ggml_mul_mat_id(ctx, l.ffn_gate_up_exps, cur, sel);
        const int64_t n_ff = gu->ne[0] / 2;
        gate = ggml_view_3d(ctx, gu, n_ff, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], 0);
        up = ggml_view_3d(ctx, gu, n_ff, gu->ne[1], gu->ne[2], gu->nb[1], gu->nb[2], n_ff * gu->nb[0]);
    } else {
        up = ggml_mul_mat_id(ctx, l.ffn_up_exps, cur, sel);   // [n_ff_exp, k, n_tok]
        if (l.ffn_up_exps_b) up = ggml_add_id(ctx, up, l.ffn_up_exps_b, sel);
        gate = ggml_mul_mat_id(ctx, l.ffn_gate_exps, cur, sel);
        if (l.ffn_gate_exps_b) gate = ggml_add_id(ctx, gate, l.ffn_gate_exps_b, sel);
    }
    ggml_tensor * h = o.act == MoeAct::SwiGLU  ? ggml_swiglu_split(ctx, gate, up)
                      : o.act == MoeAct::GeGLU ? ggml_geglu_split(ctx, gate, up)
                                               : ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f);
    ggml_tensor * down = ggml_mul_mat_id(ctx, l.ffn_down_exps, h, sel);   // [n_embd, k, n_tok]
    if (l.ffn_down_exps_s) {   // a scale per expert (gemma4), picked like the weights
        ggml_tensor * s = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, l.ffn_down_exps_s, 1, m.hp.n_expert, 1), 1,
                                         m.hp.n_expert, n_tok, 1);
        down = ggml_mul(ctx, down, ggml_get_rows(ctx, s, sel));
    }
    if (l.ffn_down_exps_b) down = ggml_add_id(ctx, down, l.ffn_down_exps_b, sel);
    down = ggml_mul(ctx, down, w);
    // sum over the k experts, in llama.cpp's order (views then adds)
    ggml_tensor * out = nullptr;
    for (int64_t i = 0; i < k; ++i) {
        ggml_tensor * e = ggml_view_2d(ctx, down, n_embd, n_tok, down->nb[2], (size_t) i * down->nb[1]);
        out = out ? ggml_add(ctx, out, e) : e;
    }
    return k == 1 ? ggml_cont(ctx, out) : out;
}

ggml_tensor * Graph::ffn_shared_expert(ggml_tensor * x, const Layer & l) const {
    ggml_tensor * g = ggml_mul_mat(ctx, l.ffn_gate_shexp, x);
    ggml_tensor * u = ggml_mul_mat(ctx, l.ffn_up_shexp, x);
    ggml_tensor * f = ggml_mul_mat(ctx, l.ffn_down_shexp, ggml_swiglu_split(ctx, g, u));
    if (!l.ffn_gate_inp_shexp) return f;   // DeepSeek, GLM: always on
    ggml_tensor * gate = ggml_sigmoid(ctx, ggml_mul_mat(ctx, l.ffn_gate_inp_shexp, x));   // [1, n_tok]
    return ggml_mul(ctx, f, gate);
}

ggml_tensor * Graph::keep_outputs(ggml_tensor * x) const {
    if (mtp) return x;   // an MTP block reads the hidden state of every row
    return output_rows(x);
}

ggml_tensor * Graph::output_rows(ggml_tensor * x) const {
    // (x->ne[1] != n_tokens: already kept, e.g. by the last layer before output())
    if (outputs == Outputs::All || outputs == Outputs::None || x->ne[1] != n_tokens || n_tokens == 1) return x;
    if (outputs == Outputs::Rows) return ggml_get_rows(ctx, x, inp_out_ids);
    return ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], (size_t) (x->ne[1] - 1) * x->nb[1]);
}

ggml_tensor * Graph::output(ggml_tensor * x, ggml_tensor * norm_w) {
    if (no_outputs()) {
        if (keep_final) {
            final_hidden = rms_norm(x, norm_w);
            ggml_set_output(final_hidden);
            ggml_build_forward_expand(gf, final_hidden);
        }
        return x;
    }
    x = output_rows(x);
    x = rms_norm(x, norm_w);
    if (embeddings) {                        // what llama.cpp's embeddings read (its t_embd)
        ggml_set_name(x, "embd");
        ggml_set_output(x);
        return x;
    }
    if (keep_final) {
        final_hidden = x;
        ggml_set_output(x);
    }
    ggml_tensor * logits = ggml_mul_mat(ctx, head ? head : m.output, x);
    ggml_set_name(logits, "logits");
    ggml_set_output(logits);
    return logits;
}

// What does not depend on the cache's layout: tokens, positions (also M-RoPE's and the attention
// temperature's), the recurrent state's rows (a hybrid's graph holds one sequence, seq0, at
// consecutive positions).
void GraphInputs::fill_common(const Graph & g, const int32_t * tokens, const int32_t * pos, int32_t seq0,
                              const int32_t * rope) {
    const int32_t n = g.n_tokens;
    if (g.inp_tokens) ggml_backend_tensor_set(g.inp_tokens, tokens, 0, sizeof(int32_t) * (size_t) n);
    if (g.inp_pos->buffer) ggml_backend_tensor_set(g.inp_pos, pos, 0, sizeof(int32_t) * (size_t) n);
    if (g.inp_kv_idx->buffer) ggml_backend_tensor_set(g.inp_kv_idx, idx_.data(), 0, sizeof(int64_t) * (size_t) n);
    if (g.inp_pos4 && g.inp_pos4->buffer) {   // M-RoPE: rope's 4 a token, or a text's (p, p, p, 0)
        pos4_.assign(4 * (size_t) n, 0);
        for (int32_t i = 0; i < n; ++i) {
            for (int j = 0; j < 4; ++j) pos4_[(size_t) j * n + i] = rope ? rope[4 * (size_t) i + j] : j < 3 ? pos[i] : 0;
        }
        ggml_backend_tensor_set(g.inp_pos4, pos4_.data(), 0, sizeof(int32_t) * pos4_.size());
    }
    if (g.inp_attn_scale && g.inp_attn_scale->buffer) {   // as llama.cpp computes it (in double)
        const HParams & hp = g.m.hp;
        scale_.resize(n);
        for (int32_t i = 0; i < n; ++i) {
            const float p = (float) pos[i];
            scale_[i] = (float) (std::log(std::floor(p / (float) hp.attn_temp_floor) + 1.0) * hp.attn_temp_scale + 1.0);
        }
        ggml_backend_tensor_set(g.inp_attn_scale, scale_.data(), 0, sizeof(float) * scale_.size());
    }
    if (g.rs) g.rs->fill_inputs(g.inp_rs_src, g.inp_rs_dst, g.inp_rs_dst_old, seq0, pos[0], n);
}

void GraphInputs::fill(const Graph & g, const UBatch & ub, const KvCells & cells) {
    const int32_t n = g.n_tokens;
    idx_.resize(n);
    for (int32_t i = 0; i < n; ++i) idx_[i] = ub.cell[i];
    if (g.inp_out_ids && g.inp_out_ids->buffer) {
        ggml_backend_tensor_set(g.inp_out_ids, ub.out_ids, 0, sizeof(int32_t) * (size_t) g.n_out_rows);
    }
    fill_common(g, ub.tokens, ub.pos, ub.seq[0], ub.rope);
    fill_masks(g, ub, cells);
}

// Token i (position p of sequence s) sees the cells of s's positions 0..p (from n_past on, its
// tail's); with a sliding window only the last n_swa of them. One sequence whose cells ascend gives the causal mask of
// a one-sequence cache, cell for cell. Not causal (an image's rows): every cell of s, the window
// counted back from p as llama.cpp does (a cell past p is never outside it); on the window layers
// only where the architecture says so (non_causal_swa_only: gemma4's full layers stay causal).
void GraphInputs::fill_masks(const Graph & g, const UBatch & ub, const KvCells & cells) {
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    const int32_t n_swa = g.m.hp.n_swa;
    const bool swa_only = g.m.arch->non_causal_swa_only;
    const size_t n = (size_t) g.n_kv * g.mask_rows();   // rows past the tokens' see nothing
    mask_.assign(n, ninf);
    if (g.inp_mask_swa) mask_swa_.assign(n, ninf);
    for (int32_t i = 0; i < g.n_tokens; ++i) {
        const int32_t p = ub.pos[i], s = ub.seq[i];
        ggml_fp16_t * row = mask_.data() + (size_t) i * g.n_kv;
        ggml_fp16_t * srow = g.inp_mask_swa ? mask_swa_.data() + (size_t) i * g.n_kv : nullptr;
        const int32_t own = cells.n_past(s);
        const int32_t last = g.causal ? p : own - 1, last_full = swa_only ? p : last;
        for (int32_t q = 0; q <= last; ++q) {
            const int32_t c = q < own ? cells.cell_at(s, q) : ub.tails[i][(size_t) (q - own)];
            if (q <= last_full) row[c] = zero;
            if (srow && q > p - n_swa) srow[c] = zero;
        }
    }
    set_masks(g);
}

void GraphInputs::fill(const Graph & g, const int32_t * tokens, int32_t n_past) {
    const int32_t n = g.n_tokens;
    pos_.resize(n);
    idx_.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        pos_[i] = n_past + i;
        idx_[i] = n_past + i;
    }
    fill_common(g, tokens, pos_.data(), 0);
    // Causal mask over the cells: token i (position n_past + i) sees cells j <= n_past + i;
    // with a sliding window only the last n_swa of them. Not causal (a dflash block): every
    // token sees the whole batch too.
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), ninf = ggml_fp32_to_fp16(-INFINITY);
    const int32_t n_swa = g.m.hp.n_swa;
    const size_t nm = (size_t) g.n_kv * g.mask_rows();
    mask_.assign(nm, ninf);
    if (g.inp_mask_swa) mask_swa_.assign(nm, ninf);
    for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = n_past + i;
        const int32_t last = g.causal ? pos - (g.sees_own ? 0 : 1) : n_past + n - 1;
        ggml_fp16_t * row = mask_.data() + (size_t) i * g.n_kv;
        std::fill(row, row + last + 1, zero);
        if (g.inp_mask_swa) {
            ggml_fp16_t * srow = mask_swa_.data() + (size_t) i * g.n_kv;
            std::fill(srow + std::max(0, pos - n_swa + 1), srow + last + 1, zero);
        }
    }
    set_masks(g);
}

void GraphInputs::set_masks(const Graph & g) {
    const size_t n = (size_t) g.n_kv * g.mask_rows();
    // a mask no layer uses is not in the graph, so it has no memory
    if (g.inp_mask->buffer) ggml_backend_tensor_set(g.inp_mask, mask_.data(), 0, n * sizeof(ggml_fp16_t));
    if (g.inp_mask_swa && g.inp_mask_swa->buffer) {
        ggml_backend_tensor_set(g.inp_mask_swa, mask_swa_.data(), 0, n * sizeof(ggml_fp16_t));
    }
}

}  // namespace psl
