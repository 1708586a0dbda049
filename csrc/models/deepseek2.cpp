// DeepSeek V2 / V3 / R1 and their distillations (GGUF architecture "deepseek2"), as llama.cpp
// b11434 builds them (src/models/deepseek2.cpp), in the absorbed multi-head latent attention
// form its converter writes (attn_k_b / attn_v_b, key_length_mla):
// * q: low rank (wq_a, RMS norm, wq_b), or one matrix (wq: V2-Lite); per head a no-rope part
//   (key_length_mla - n_rot) and a roped part (n_rot), NORMAL rope with YaRN;
// * one joint projection gives the latent (kv_lora_rank, RMS-normed) and a single roped key part
//   (n_rot) shared by all heads: the cache keeps exactly that row per token (memory/kv_cache,
//   HParams::kv_k_width), no V;
// * the no-rope q is absorbed into the latent space per head (attn_k_b), so attention is MQA
//   over [latent; roped key] rows with V = the latent; its output goes back to heads through
//   attn_v_b; kq scale mscale^2 / sqrt(key_length_mla) (YaRN's mscale with its log multiplier);
// * FFN: dense SwiGLU on the leading_dense_block_count first layers, then experts: softmax or
//   sigmoid scores (expert_gating_func), the selection bias exp_probs_b (V3), group-limited
//   routing (expert_group_count / used), weights optionally renormalized and scaled, plus
//   n_expert_shared always-on shared experts;
// * optional Llama-4 attention temperature (Mistral Large 3); the NextN / MTP block of V3-style
//   files (eh_proj of [enorm(embed); hnorm(h)], the same MLA layer and MoE, shared head norm).
#include "models/common/arch_common.h"
#include "models/common/mtp_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    const int64_t n_vocab = vocab_size(f, a);
    hp.n_nextn = (int32_t) f.get_int(a + ".nextn_predict_layers", 0);
    if (hp.n_nextn < 0 || hp.n_nextn >= hp.n_layer) fail(PSL_ERR_FORMAT, "'%s': bad nextn_predict_layers %d", path, hp.n_nextn);
    hp.n_layer -= hp.n_nextn;   // the trunk; MTP layers follow it
    // llama.cpp's "lite" variants (V2-Lite, GigaChat3-10B, Kanana-2-30B) have no q low rank
    const bool lite = hp.n_layer == 27 || hp.n_layer == 26 || (hp.n_layer == 48 && n_vocab == 128256);
    if (!lite) hp.n_lora_q = (int32_t) f.get_int(a + ".attention.q_lora_rank");
    hp.n_lora_kv = (int32_t) f.get_int(a + ".attention.kv_lora_rank");
    hp.n_embd_head_k_mla = (int32_t) f.get_int(a + ".attention.key_length_mla", 0);
    hp.n_embd_head_v_mla = (int32_t) f.get_int(a + ".attention.value_length_mla", 0);
    if (hp.n_embd_head_k_mla == 0 && hp.n_embd_head_v_mla == 0) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': a deepseek2 file without key_length_mla (the legacy attn_kv_b layout) is not "
             "supported: convert it again with a current convert_hf_to_gguf.py", path);
    }
    load_moe_hparams(f, a, hp);
    hp.expert_weights_norm = f.get_int(a + ".expert_weights_norm", 0) != 0;
    // 0 = unset: softmax (V2, V2.5), except GLM-4.7-Lite, which llama.cpp recognizes by shape
    const int64_t gating = f.get_int(a + ".expert_gating_func", 0);
    hp.expert_gating = gating != 0 ? (int32_t) gating : ((hp.n_layer == 47 || hp.n_layer == 48) && n_vocab == 154880) ? 2 : 1;
    if (hp.expert_gating != 1 && hp.expert_gating != 2) fail(PSL_ERR_UNSUPPORTED, "'%s': expert gating function %d is not supported", path, hp.expert_gating);
    // the converter stores 0.1 * the multiplier (llama.cpp's [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX])
    set_yarn_log_mul(f, a, hp, (float) f.get_float(a + ".rope.scaling.yarn_log_multiplier", 0.0) / 0.1f, true);
    load_attn_temperature(f, a, hp, 0);
    const bool ok = hp.n_lora_kv > 0 && hp.n_lora_kv <= 8192 && hp.n_lora_q >= 0 && hp.n_lora_q <= 65536 &&
                    hp.n_embd_head_k_mla > hp.n_rot && hp.n_embd_head_k_mla <= 4096 && hp.n_embd_head_v_mla > 0 &&
                    hp.n_embd_head_v_mla <= 4096 && hp.n_head_kv == 1 && hp.n_embd_head_k == hp.n_lora_kv + hp.n_rot &&
                    hp.n_embd_head_v == hp.n_lora_kv && hp.n_expert_shared > 0;
    if (!ok) {
        fail(PSL_ERR_FORMAT, "'%s': inconsistent MLA hyper-parameters (kv_lora_rank %d, q_lora_rank %d, key/value length "
             "%d/%d, MLA %d/%d, n_rot %d, n_head_kv %d, shared experts %d)", path, hp.n_lora_kv, hp.n_lora_q,
             hp.n_embd_head_k, hp.n_embd_head_v, hp.n_embd_head_k_mla, hp.n_embd_head_v_mla, hp.n_rot, hp.n_head_kv,
             hp.n_expert_shared);
    }
}

// One layer's weights (a trunk layer, or the MTP block at il == n_layer).
void layer_tensors(TensorLoader & tl, psl_model & m, int il) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, n_head = hp.n_head, kq = hp.n_embd_head_k_mla, nope = kq - hp.n_rot;
    Layer & l = m.layers[il];
    l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
    if (hp.n_lora_q > 0) {
        l.attn_q_a_norm = tl.layer(il, "attn_q_a_norm.weight", {hp.n_lora_q});
        l.wq_a = tl.layer_matrix(il, "attn_q_a.weight", {n_embd, hp.n_lora_q});
        l.wq_b = tl.layer_matrix(il, "attn_q_b.weight", {hp.n_lora_q, n_head * kq});
    } else {
        l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, n_head * kq});
    }
    l.attn_kv_a_norm = tl.layer(il, "attn_kv_a_norm.weight", {hp.n_lora_kv});
    l.wkv_a_mqa = tl.layer_matrix(il, "attn_kv_a_mqa.weight", {n_embd, hp.n_lora_kv + hp.n_rot});
    l.wk_b = tl.layer_matrix(il, "attn_k_b.weight", {nope, hp.n_lora_kv, n_head});
    l.wv_b = tl.layer_matrix(il, "attn_v_b.weight", {hp.n_lora_kv, hp.n_embd_head_v_mla, n_head});
    l.wo = tl.layer_matrix(il, "attn_output.weight", {n_head * hp.n_embd_head_v_mla, n_embd});
    if (il < hp.n_layer_dense_lead) {
        create_ffn(tl, m, il);   // with its norm
        return;
    }
    l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
    create_moe(tl, m, il, /*bias =*/ false);
    l.ffn_exp_probs_b = tl.layer(il, "exp_probs_b.bias", {hp.n_expert}, false);
    create_shared_expert(tl, m, il, (int64_t) hp.n_ff_exp * hp.n_expert_shared, /*gated =*/ false);
}

void tensors(TensorLoader & tl, psl_model & m) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) layer_tensors(tl, m, il);
    if (m.hp.n_nextn > 0 && m.hp.n_lora_q > 0 && m.hp.attn_temp_scale == 0.0f) load_nextn_layer(tl, m, layer_tensors);
}

// The absorbed MLA attention of layer il on the normed input h; returns [n_embd, n_tokens] (the
// output rows only when last).
ggml_tensor * mla_attention(Graph & g, int il, ggml_tensor * h, bool last) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t n = g.n_tokens, nh = hp.n_head, kq = hp.n_embd_head_k_mla, rot = hp.n_rot, nope = kq - rot;
    const int64_t lat = hp.n_lora_kv;
    ggml_tensor * q = l.wq ? ggml_mul_mat(ctx, l.wq, h)
                           : ggml_mul_mat(ctx, l.wq_b, g.rms_norm(ggml_mul_mat(ctx, l.wq_a, h), l.attn_q_a_norm));
    q = ggml_reshape_3d(ctx, q, kq, nh, n);
    ggml_tensor * kv = ggml_mul_mat(ctx, l.wkv_a_mqa, h);   // [lat + rot, n]
    ggml_tensor * latent = ggml_view_2d(ctx, kv, lat, n, kv->nb[1], 0);
    ggml_tensor * k_pe = ggml_view_3d(ctx, kv, rot, 1, n, kv->nb[1], kv->nb[1], ggml_row_size(kv->type, lat));
    k_pe = g.rope(k_pe, GGML_ROPE_TYPE_NORMAL, hp.rope_freq_base, hp.rope_freq_scale);
    latent = g.rms_norm(latent, l.attn_kv_a_norm);
    ggml_tensor * q_nope = ggml_view_3d(ctx, q, nope, nh, n, q->nb[1], q->nb[2], 0);
    ggml_tensor * q_pe = ggml_view_3d(ctx, q, rot, nh, n, q->nb[1], q->nb[2], ggml_row_size(q->type, nope));
    q_pe = g.rope(q_pe, GGML_ROPE_TYPE_NORMAL, hp.rope_freq_base, hp.rope_freq_scale);
    // per head: q_nope into the latent space, [lat, n_head, n]
    ggml_tensor * q_lat = ggml_permute(ctx, ggml_mul_mat(ctx, l.wk_b, ggml_permute(ctx, q_nope, 0, 2, 1, 3)), 0, 2, 1, 3);
    ggml_tensor * Q = ggml_concat(ctx, q_lat, q_pe, 0);
    ggml_tensor * K = ggml_concat(ctx, ggml_reshape_3d(ctx, latent, lat, 1, n), k_pe, 0);
    if (hp.attn_temp_scale != 0.0f) Q = g.attn_temperature(Q);
    // YaRN: the factor ggml's rope applies, undone, times the log-multiplier mscale, squared
    const float fs = hp.rope_freq_scale, attn_org = hp.rope_attn_factor * (1.0f + 0.1f * logf(1.0f / fs));
    const float mscale = attn_org * (1.0f + 0.1f * hp.rope_yarn_log_mul * logf(1.0f / fs));
    ggml_tensor * out = g.attention_heads(il, Q, K, nullptr, mscale * mscale / sqrtf((float) kq), lat);   // [lat, nh, n]
    // back to the heads' value space through attn_v_b
    out = ggml_permute(ctx, ggml_mul_mat(ctx, l.wv_b, ggml_permute(ctx, out, 0, 2, 1, 3)), 0, 2, 1, 3);
    out = ggml_cont_2d(ctx, out, hp.n_embd_head_v_mla * nh, n);
    if (last) out = g.keep_outputs(out);   // only the rows that produce logits go on
    return ggml_mul_mat(ctx, l.wo, out);
}

// One layer (or the MTP block's body) on the residual stream x.
ggml_tensor * block(Graph & g, int il, ggml_tensor * x, bool last) {
    const Layer & l = g.m.layers[il];
    ggml_tensor * a = mla_attention(g, il, g.rms_norm(x, l.attn_norm), last);
    if (last) x = g.keep_outputs(x);
    x = ggml_add(g.ctx, a, x);
    return ggml_add(g.ctx, ffn_dense_lead_moe(g, il, g.rms_norm(x, l.ffn_norm)), x);
}

const NextnOps k_nextn = {block};

ggml_tensor * build(Graph & g) { return nextn_build(g, k_nextn); }

ggml_tensor * build_mtp(Graph & g) { return nextn_draft(g, k_nextn); }

}  // namespace

extern const ArchOps arch_deepseek2 = {"deepseek2", hparams, tensors, build, build_mtp};

}  // namespace psl
