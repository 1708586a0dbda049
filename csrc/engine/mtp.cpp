// MTP drafting: the block's weights, its part of the target's graph, and the draft steps
// (what is computed: mtp.h).
#include "engine/mtp.h"

#include "engine/context.h"
#include "api/error.h"
#include "model.h"

#include <algorithm>
#include <cstring>

namespace psl {

void load_mtp_layer(TensorLoader & tl, psl_model & m) {
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
    l.ffn_gate = tl.layer_matrix(il, "ffn_gate.weight", {n_embd, hp.n_ff});
    l.ffn_up = tl.layer_matrix(il, "ffn_up.weight", {n_embd, hp.n_ff});
    l.ffn_down = tl.layer_matrix(il, "ffn_down.weight", {hp.n_ff, n_embd});
    m.mtp_layer = il;
}

namespace {

ggml_tensor * new_input(Graph & g, int64_t n0, int64_t n1, const char * name) {
    ggml_tensor * t = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F32, n0, n1);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

// The token embeddings the block reads: its own table when the file has one.
ggml_tensor * mtp_embed(Graph & g, ggml_tensor * embd) {
    const Layer & l = g.m.layers[g.m.mtp_layer];
    return l.nextn_embed ? ggml_get_rows(g.ctx, l.nextn_embed, g.inp_tokens) : embd;
}

// The block up to its residual stream's output; attn_only stops after the cache write.
ggml_tensor * mtp_block(Graph & g, ggml_tensor * e, ggml_tensor * h, bool attn_only) {
    ggml_context * ctx = g.ctx;
    const int il = g.m.mtp_layer;
    const Layer & l = g.m.layers[il];
    ggml_tensor * eh = ggml_concat(ctx, g.rms_norm(e, l.nextn_enorm), g.rms_norm(h, l.nextn_hnorm), 0);
    ggml_tensor * y = ggml_mul_mat(ctx, l.nextn_eh_proj, eh);
    ggml_tensor * a = qwen35_gated_attention(g, il, g.rms_norm(y, l.attn_norm));
    if (attn_only) return a;   // the K/V writes are already in the graph
    y = ggml_add(ctx, y, a);
    return ggml_add(ctx, y, g.ffn_swiglu(g.rms_norm(y, l.attn_post_norm), l));
}

}  // namespace

void mtp_fill(Graph & g, ggml_tensor * embd, ggml_tensor * x) {
    ggml_context * ctx = g.ctx;
    const int64_t n_embd = g.m.hp.n_embd, n = g.n_tokens;
    ggml_tensor * hn = g.rms_norm(x, g.m.output_norm);
    ggml_set_name(hn, "mtp_hidden");
    ggml_set_output(hn);
    ggml_build_forward_expand(g.gf, hn);
    g.mtp_hidden = hn;
    g.inp_mtp_h = new_input(g, n_embd, 1, "inp_mtp_h");
    // token i pairs with the hidden state of token i - 1 (the first with the one kept before)
    ggml_tensor * prev = g.inp_mtp_h;
    if (n > 1) prev = ggml_concat(ctx, prev, ggml_view_2d(ctx, hn, n_embd, n - 1, hn->nb[1], 0), 1);
    mtp_block(g, mtp_embed(g, embd), prev, true);
}

MtpState::MtpState(psl_context & c)
    : c_(c), n_embd_(c.model->hp.n_embd), ring_n_(std::max(64, c.mem->rs() ? c.mem->rs()->n_snap() + 1 : 64)) {
    if (c.model->mtp_layer < 0) fail(PSL_ERR_UNSUPPORTED, "the model has no MTP (nextn) layers to draft with");
    ring_.assign((size_t) ring_n_ * n_embd_, 0.0f);
    zeros_.assign((size_t) n_embd_, 0.0f);
    chain_.assign((size_t) n_embd_, 0.0f);
    std::vector<ggml_backend_t> backends;
    if (c.backend_gpu) backends.push_back(c.backend_gpu.get());
    backends.push_back(c.backend_cpu.get());
    graph_buf_.resize(ggml_tensor_overhead() * graph_size_ + ggml_graph_overhead_custom(graph_size_, false));
    sched_.reset(ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), graph_size_, false, true));
    if (!sched_) fail(PSL_ERR_BACKEND, "cannot create the MTP scheduler");
}

MtpState::~MtpState() {
    sched_.reset();
    graph_.reset();
    graph_ctx_.reset();
}

const float * MtpState::hidden_at(int32_t pos) {
    if (pos < lo_ || pos >= hi_) return zeros_.data();   // llama.cpp starts from zeros too
    return ring_.data() + (size_t) (pos % ring_n_) * n_embd_;
}

void MtpState::before_compute(const Graph & g, int32_t n_past) {
    ggml_backend_tensor_set(g.inp_mtp_h, hidden_at(n_past - 1), 0, sizeof(float) * (size_t) n_embd_);
}

void MtpState::after_compute(const Graph & g, int32_t n_past) {
    const int32_t n = g.n_tokens;
    hi_ = std::min(hi_, n_past);   // rows at n_past and later are being replaced
    if (lo_ > hi_) lo_ = hi_;
    const int32_t first = std::max(0, n - ring_n_);   // only the last ring_n_ rows fit
    scratch_.resize((size_t) (n - first) * n_embd_);
    ggml_backend_tensor_get(g.mtp_hidden, scratch_.data(), (size_t) first * g.mtp_hidden->nb[1], scratch_.size() * sizeof(float));
    for (int32_t i = first; i < n; ++i) {
        std::memcpy(ring_.data() + (size_t) ((n_past + i) % ring_n_) * n_embd_,
                    scratch_.data() + (size_t) (i - first) * n_embd_, sizeof(float) * (size_t) n_embd_);
    }
    if (hi_ < n_past) lo_ = n_past;   // a gap: nothing before this batch is known
    hi_ = n_past + n;
    lo_ = std::max(lo_, hi_ - ring_n_);
}

void MtpState::build(int32_t n_kv) {
    graph_.reset();
    graph_ctx_.reset();
    graph_kv_ = -1;
    ggml_init_params p = {graph_buf_.size(), graph_buf_.data(), /*no_alloc =*/ true};
    graph_ctx_.reset(ggml_init(p));
    if (!graph_ctx_) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the MTP graph context");
    gf_ = ggml_new_graph_custom(graph_ctx_.get(), graph_size_, false);
    graph_ = std::make_unique<Graph>(graph_ctx_.get(), gf_, *c_.model, c_.mem->kv(), 1, n_kv, true);
    Graph & g = *graph_;
    const psl_model & m = *c_.model;
    const Layer & l = m.layers[m.mtp_layer];
    g.inp_mtp_h = new_input(g, n_embd_, 1, "inp_mtp_h");
    ggml_tensor * y = mtp_block(g, mtp_embed(g, g.embed()), g.inp_mtp_h, false);
    ggml_tensor * h = g.rms_norm(y, l.nextn_head_norm ? l.nextn_head_norm : m.output_norm);
    ggml_set_output(h);
    g.mtp_hidden = h;
    logits_ = ggml_mul_mat(g.ctx, l.nextn_head ? l.nextn_head : m.output, h);
    ggml_set_output(logits_);
    ggml_build_forward_expand(gf_, h);
    ggml_build_forward_expand(gf_, logits_);
    ggml_backend_sched_reset(sched_.get());
    if (!ggml_backend_sched_alloc_graph(sched_.get(), gf_)) fail(PSL_ERR_BACKEND, "cannot allocate the MTP graph");
    graph_kv_ = n_kv;
}

void MtpState::draft(int32_t token, int32_t step, float * out) {
    const int32_t n_vocab = c_.model->hp.n_vocab;
    if (token < 0 || token >= n_vocab) fail(PSL_ERR_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", token, n_vocab);
    c_.replay();   // a pending replay also rebuilds the MTP cache
    const int32_t n_past = c_.mem->n_past();
    if (step < 0 || (step > 0 && (chain_step_ != step - 1 || chain_past_ != n_past))) {
        fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft step %d must follow step %d at the same cache length", step, step - 1);
    }
    const int32_t pos = n_past + step;
    if (pos >= c_.params.n_ctx) fail(PSL_ERR_CONTEXT_FULL, "MTP draft at position %d: n_ctx is %d", pos, c_.params.n_ctx);
    const int32_t n_kv = c_.mem->kv().n_kv_for(pos + 1);
    if (n_kv != graph_kv_) build(n_kv);
    chain_step_ = -1;   // until this step succeeds
    c_.inputs.fill(*graph_, &token, pos);
    const float * h = step == 0 ? hidden_at(n_past - 1) : chain_.data();
    ggml_backend_tensor_set(graph_->inp_mtp_h, h, 0, sizeof(float) * (size_t) n_embd_);
    const ggml_status st = ggml_backend_sched_graph_compute(sched_.get(), gf_);
    if (st == GGML_STATUS_ABORTED) {   // psl_context_interrupt: consumed, as by an eval
        c_.interrupt = false;
        fail(PSL_ERR_INTERRUPTED, "MTP draft interrupted");
    }
    if (st != GGML_STATUS_SUCCESS) fail(PSL_ERR_BACKEND, "MTP graph computation failed (ggml status %d)", (int) st);
    ggml_backend_tensor_get(logits_, out, 0, sizeof(float) * (size_t) n_vocab);
    ggml_backend_tensor_get(graph_->mtp_hidden, chain_.data(), 0, sizeof(float) * (size_t) n_embd_);
    chain_step_ = step;
    chain_past_ = n_past;
}

}  // namespace psl
