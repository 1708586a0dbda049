// GLM-4.5 / 4.6 / 4.7 (Air) (GGUF architecture "glm4moe"), as llama.cpp b11434 builds them
// (src/models/glm4-moe.cpp): RMS pre-norm; attention with q/k/v biases and per-head q/k RMS
// norms where the file has them, NEOX rope over rope.dimension_count (partial: GLM-4.5 ropes
// half of each head; M-RoPE when the file gives sections), scale 1/sqrt(head); residual; the
// post-attention norm is the FFN's pre-norm; the first leading_dense_block_count layers have a
// dense SwiGLU FFN, the others experts: sigmoid scores (expert_gating_func, sigmoid unless the
// file says otherwise) with the selection bias exp_probs_b, top-k weights renormalized and
// scaled as the file says, plus always-on shared experts; residual. The NextN / MTP block
// after the trunk is one more such layer behind its input projection (models/common/mtp_common).
#include "models/common/arch_common.h"
#include "models/common/mtp_common.h"

namespace psl {

namespace {

void hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    hp.n_nextn = (int32_t) f.get_int(a + ".nextn_predict_layers", 0);
    if (hp.n_nextn < 0 || hp.n_nextn >= hp.n_layer) fail(PSL_ERR_FORMAT, "'%s': bad nextn_predict_layers %d", path, hp.n_nextn);
    hp.n_layer -= hp.n_nextn;   // the trunk; MTP layers follow it
    load_moe_hparams(f, a, hp);
    if (!f.has(a + ".expert_shared_count")) f.get_int(a + ".expert_shared_count");   // required, as in llama.cpp
    hp.expert_weights_norm = f.get_int(a + ".expert_weights_norm", 0) != 0;
    const int64_t gating = f.get_int(a + ".expert_gating_func", 0);
    hp.expert_gating = gating != 0 ? (int32_t) gating : 2;   // GLM-4.5: sigmoid
    if (hp.expert_gating != 1 && hp.expert_gating != 2) fail(PSL_ERR_UNSUPPORTED, "'%s': expert gating function %d is not supported", path, hp.expert_gating);
    const std::vector<int64_t> sec = f.get_ints(a + ".rope.dimension_sections");
    if (sec.size() > 4) fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections has %zu entries", path, sec.size());
    int32_t sum = 0;
    for (size_t i = 0; i < sec.size(); ++i) {
        if (sec[i] < 0 || sec[i] > 4096) fail(PSL_ERR_FORMAT, "'%s': bad rope section %lld", path, (long long) sec[i]);
        hp.rope_sections[i] = (int32_t) sec[i];
        sum += (int32_t) sec[i];
    }
    if (sum > hp.n_embd_head_k) fail(PSL_ERR_FORMAT, "'%s': rope sections sum to more than a head (%d)", path, sum);
    if (hp.n_embd_head_k != hp.n_embd_head_v) fail(PSL_ERR_FORMAT, "'%s': key and value head sizes differ", path);
}

bool use_mrope(const HParams & hp) { return hp.rope_sections[0] > 0 && hp.rope_sections[1] > 0; }

void layer_tensors(TensorLoader & tl, psl_model & m, int il) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd, hd = hp.n_embd_head_k, n_q = hd * hp.n_head, n_kv = hd * hp.n_head_kv;
    Layer & l = m.layers[il];
    create_attention(tl, m, il, /*bias =*/ false, /*qk_norm =*/ false);
    l.bq = tl.layer(il, "attn_q.bias", {n_q}, false);
    l.bk = tl.layer(il, "attn_k.bias", {n_kv}, false);
    l.bv = tl.layer(il, "attn_v.bias", {n_kv}, false);
    l.q_norm = tl.layer(il, "attn_q_norm.weight", {hd}, false);
    l.k_norm = tl.layer(il, "attn_k_norm.weight", {hd}, false);
    l.attn_post_norm = tl.layer(il, "post_attention_norm.weight", {n_embd});
    if (il < hp.n_layer_dense_lead) {
        const int64_t n_ff = hp.n_ff;
        l.ffn_gate = tl.layer_matrix(il, "ffn_gate.weight", {n_embd, n_ff});
        l.ffn_up = tl.layer_matrix(il, "ffn_up.weight", {n_embd, n_ff});
        l.ffn_down = tl.layer_matrix(il, "ffn_down.weight", {n_ff, n_embd});
        return;
    }
    create_moe(tl, m, il, /*bias =*/ false);
    l.ffn_exp_probs_b = tl.layer(il, "exp_probs_b.bias", {hp.n_expert});
    if (hp.n_expert_shared > 0) create_shared_expert(tl, m, il, (int64_t) hp.n_ff_exp * hp.n_expert_shared, false);
}

void tensors(TensorLoader & tl, psl_model & m) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) layer_tensors(tl, m, il);
    if (m.hp.n_nextn > 0) load_nextn_layer(tl, m, layer_tensors);
}

ggml_tensor * attention(Graph & g, int il, ggml_tensor * h, bool last) {
    const HParams & hp = g.m.hp;
    const Graph::AttnOpts o = {GGML_ROPE_TYPE_NEOX, hp.rope_freq_base, hp.rope_freq_scale, 1.0f,
                               1.0f / sqrtf((float) hp.n_embd_head_k)};
    if (!use_mrope(hp)) return g.self_attention(il, h, o);   // keeps the output rows on the last layer
    // M-RoPE (GLM-4.5V's text path): every section at the token position
    ggml_context * ctx = g.ctx;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.n_embd_head_k, n = g.n_tokens;
    if (!g.inp_pos4) {
        g.inp_pos4 = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4 * n);
        ggml_set_name(g.inp_pos4, "inp_pos4");
        ggml_set_input(g.inp_pos4);
    }
    auto proj = [&](ggml_tensor * w, ggml_tensor * b, int64_t heads) {
        ggml_tensor * t = ggml_mul_mat(ctx, w, h);
        return ggml_reshape_3d(ctx, b ? ggml_add(ctx, t, b) : t, hd, heads, n);
    };
    ggml_tensor * q = proj(l.wq, l.bq, hp.n_head), * k = proj(l.wk, l.bk, hp.n_head_kv), * v = proj(l.wv, l.bv, hp.n_head_kv);
    if (l.q_norm) q = g.rms_norm(q, l.q_norm);
    if (l.k_norm) k = g.rms_norm(k, l.k_norm);
    int sections[4];
    std::copy(hp.rope_sections, hp.rope_sections + 4, sections);
    auto rope = [&](ggml_tensor * t) {
        return ggml_rope_multi(ctx, t, g.inp_pos4, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_MROPE, hp.n_ctx_train,
                               hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor,
                               hp.yarn_beta_fast, hp.yarn_beta_slow);
    };
    ggml_tensor * a = g.attention(il, rope(q), rope(k), v, o.kq_scale);
    if (last) a = g.keep_outputs(a);
    return ggml_mul_mat(ctx, l.wo, a);
}

ggml_tensor * block(Graph & g, int il, ggml_tensor * x, bool last) {
    const Layer & l = g.m.layers[il];
    ggml_tensor * a = attention(g, il, g.rms_norm(x, l.attn_norm), last);
    if (last) x = g.keep_outputs(x);
    x = ggml_add(g.ctx, a, x);
    return ggml_add(g.ctx, ffn_dense_lead_moe(g, il, g.rms_norm(x, l.attn_post_norm)), x);
}

const NextnOps k_nextn = {block};

ggml_tensor * build(Graph & g) { return nextn_build(g, k_nextn); }

ggml_tensor * build_mtp(Graph & g) { return nextn_draft(g, k_nextn); }

}  // namespace

extern const ArchOps arch_glm4moe = {"glm4moe", hparams, tensors, build, build_mtp};

}  // namespace psl
