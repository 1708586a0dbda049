// The NextN / MTP block shared by deepseek2 and glm4moe, and the parts qwen35's MTP block shares (mtp_common.h).
#include "models/common/mtp_common.h"

namespace psl {

void load_nextn_layer(TensorLoader & tl, psl_model & m, void (*layer_tensors)(TensorLoader &, psl_model &, int)) {
    const HParams & hp = m.hp;
    const int il = hp.n_layer;   // the first block after the trunk
    const int64_t n_embd = hp.n_embd;
    m.layers.resize((size_t) il + 1);
    Layer & l = m.layers[il];
    l.nextn_eh_proj = tl.layer_matrix(il, "nextn.eh_proj.weight", {2 * n_embd, n_embd}, false);
    if (!l.nextn_eh_proj) return;   // announced but not shipped (a converter dropped them)
    l.nextn_enorm = tl.layer(il, "nextn.enorm.weight", {n_embd});
    l.nextn_hnorm = tl.layer(il, "nextn.hnorm.weight", {n_embd});
    l.nextn_embed = tl.layer(il, "nextn.embed_tokens.weight", {n_embd, hp.n_vocab}, false);
    l.nextn_head_norm = tl.layer(il, "nextn.shared_head_norm.weight", {n_embd}, false);
    l.nextn_head = tl.layer_matrix(il, "nextn.shared_head_head.weight", {n_embd, hp.n_vocab}, false);
    layer_tensors(tl, m, il);
    m.mtp_layer = il;
}

namespace {

ggml_tensor * new_input(Graph & g, int64_t n0, int64_t n1, const char * name) {
    ggml_tensor * t = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F32, n0, n1);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

// The block's input projection of token embeddings e and hidden rows h.
ggml_tensor * project(Graph & g, ggml_tensor * e, ggml_tensor * h) {
    const Layer & l = g.m.layers[g.m.mtp_layer];
    if (l.nextn_embed && !g.rows_input) e = ggml_get_rows(g.ctx, l.nextn_embed, g.inp_tokens);   // rows: themselves
    ggml_tensor * eh = ggml_concat(g.ctx, g.rms_norm(e, l.nextn_enorm), g.rms_norm(h, l.nextn_hnorm), 0);
    return ggml_mul_mat(g.ctx, l.nextn_eh_proj, eh);
}

}  // namespace

ggml_tensor * mtp_prev_hidden(Graph & g, ggml_tensor * x) {
    const int64_t n_embd = g.m.hp.n_embd, n = g.n_tokens;
    ggml_tensor * hn = g.rms_norm(x, g.m.output_norm);
    ggml_set_name(hn, "mtp_hidden");
    ggml_set_output(hn);
    ggml_build_forward_expand(g.gf, hn);
    g.mtp_hidden = hn;
    g.inp_mtp_h = new_input(g, n_embd, 1, "inp_mtp_h");
    // token i pairs with the hidden state of token i - 1 (the first with the one kept before)
    ggml_tensor * prev = g.inp_mtp_h;
    if (n > 1) prev = ggml_concat(g.ctx, prev, ggml_view_2d(g.ctx, hn, n_embd, n - 1, hn->nb[1], 0), 1);
    return prev;
}

ggml_tensor * mtp_draft_input(Graph & g) {
    g.inp_mtp_h = new_input(g, g.m.hp.n_embd, g.n_tokens, "inp_mtp_h");   // each node's own
    return g.inp_mtp_h;
}

ggml_tensor * mtp_head(Graph & g, ggml_tensor * y) {
    const psl_model & m = g.m;
    const Layer & l = m.layers[m.mtp_layer];
    ggml_tensor * h = g.rms_norm(y, l.nextn_head_norm ? l.nextn_head_norm : m.output_norm);
    ggml_set_output(h);
    g.mtp_hidden = h;
    ggml_tensor * logits = ggml_mul_mat(g.ctx, l.nextn_head ? l.nextn_head : m.output, h);
    ggml_set_output(logits);
    ggml_build_forward_expand(g.gf, h);
    ggml_build_forward_expand(g.gf, logits);
    return logits;
}

void nextn_fill(Graph & g, ggml_tensor * embd, ggml_tensor * x, const NextnOps & ops) {
    // only the block's cache writes join the graph (its output is not expanded)
    ops.block(g, g.m.mtp_layer, project(g, embd, mtp_prev_hidden(g, x)), false);
}

ggml_tensor * nextn_draft(Graph & g, const NextnOps & ops) {
    return mtp_head(g, ops.block(g, g.m.mtp_layer, project(g, g.embed(), mtp_draft_input(g)), false));
}

ggml_tensor * nextn_build(Graph & g, const NextnOps & ops) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = g.embed();
    ggml_tensor * embd = x;
    for (int il = 0; il < hp.n_layer; ++il) {
        g.layer_input(il, x);
        x = ops.block(g, il, x, il == hp.n_layer - 1);   // (keep_outputs keeps every row for g.mtp)
    }
    if (g.mtp) nextn_fill(g, embd, x, ops);
    return g.output(x, g.m.output_norm);
}

ggml_tensor * ffn_dense_lead_moe(Graph & g, int il, ggml_tensor * x) {
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    if (il < hp.n_layer_dense_lead) return g.ffn_swiglu(x, l);
    const Graph::MoeOpts o = {hp.expert_gating == 2 ? Graph::MoeGating::Sigmoid : Graph::MoeGating::SoftmaxAll,
                              Graph::MoeAct::SwiGLU, hp.expert_weights_norm, hp.expert_weights_scale};
    ggml_tensor * f = g.ffn_moe(x, l, o);
    return l.ffn_up_shexp ? ggml_add(g.ctx, f, g.ffn_shared_expert(x, l)) : f;
}

}  // namespace psl
