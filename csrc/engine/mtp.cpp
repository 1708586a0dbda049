// MTP drafting: the draft steps (what is computed: mtp.h; the block's weights and graphs are
// the architecture's, models/qwen35.cpp).
#include "engine/mtp.h"

#include "error.h"
#include "model.h"

#include <algorithm>

namespace psl {

MtpState::MtpState(const psl_model & m, KvCache & kv, std::vector<ggml_backend_t> backends, int32_t n_ctx,
                   int32_t min_rows)
    : m_(m), kv_(kv), n_ctx_(n_ctx), n_embd_(m.hp.n_embd), n_rows_(std::max(64, min_rows)),
      seqs_((size_t) kv.cells().n_seq()) {
    if (m.mtp_layer < 0 || !m.arch->build_mtp) fail(PSL_ERR_UNSUPPORTED, "the model has no MTP (nextn) layers to draft with");
    graph_buf_.resize(ggml_tensor_overhead() * graph_size_ + ggml_graph_overhead_custom(graph_size_, false));
    sched_.reset(ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), graph_size_, false, true));
    if (!sched_) fail(PSL_ERR_BACKEND, "cannot create the MTP scheduler");
}

MtpState::~MtpState() {
    sched_.reset();
    graph_.reset();
    graph_ctx_.reset();
}

MtpState::Seq & MtpState::seq(int32_t s) {
    if (!seqs_[s]) {
        seqs_[s] = std::make_unique<Seq>(Seq{HiddenRing(n_embd_, n_rows_), std::vector<float>((size_t) n_embd_, 0.0f)});
    }
    return *seqs_[s];
}

void MtpState::clear() {
    for (auto & s : seqs_) s.reset();
}

void MtpState::copy(int32_t src, int32_t dst) {
    if (src == dst) return;
    seqs_[dst] = std::make_unique<Seq>(seq(src));
    seqs_[dst]->step = -1;   // a draft chain is the sequence's own
}

void MtpState::before_compute(const Graph & g, int32_t s, int32_t n_past) {
    ggml_backend_tensor_set(g.inp_mtp_h, seq(s).hidden.at(n_past - 1), 0, sizeof(float) * (size_t) n_embd_);
}

void MtpState::after_compute(const Graph & g, int32_t s, int32_t n_past) {
    HiddenRing & hidden = seq(s).hidden;
    const int32_t n = g.n_tokens, first = n - hidden.kept(n);
    scratch_.resize((size_t) (n - first) * n_embd_);
    ggml_backend_tensor_get(g.mtp_hidden, scratch_.data(), (size_t) first * g.mtp_hidden->nb[1], scratch_.size() * sizeof(float));
    hidden.store(n_past, n, scratch_.data());
}

void MtpState::build(int32_t n_kv) {
    graph_.reset();
    graph_ctx_.reset();
    graph_kv_ = -1;
    ggml_init_params p = {graph_buf_.size(), graph_buf_.data(), /*no_alloc =*/ true};
    graph_ctx_.reset(ggml_init(p));
    if (!graph_ctx_) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the MTP graph context");
    gf_ = ggml_new_graph_custom(graph_ctx_.get(), graph_size_, false);
    graph_ = std::make_unique<Graph>(graph_ctx_.get(), gf_, m_, kv_, 1, n_kv, Graph::Outputs::All);
    logits_ = m_.arch->build_mtp(*graph_);
    ggml_backend_sched_reset(sched_.get());
    if (!ggml_backend_sched_alloc_graph(sched_.get(), gf_)) fail(PSL_ERR_BACKEND, "cannot allocate the MTP graph");
    graph_kv_ = n_kv;
}

void MtpState::draft(int32_t s, int32_t token, int32_t step, std::atomic<bool> & interrupt, float * out) {
    KvCells & cells = kv_.cells();
    const int32_t n_past = cells.n_past(s);
    Seq & q = seq(s);
    if (step < 0 || (step > 0 && (q.step != step - 1 || q.past != n_past || cells.n_scratch(s) != step))) {
        fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft step %d must follow step %d at the same cache length", step, step - 1);
    }
    const int32_t pos = n_past + step;
    if (pos >= n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "MTP draft at position %d: n_ctx is %d", pos, n_ctx_);
    q.step = -1;   // until this step succeeds
    if (step == 0) cells.drop_scratch(s);
    const int32_t cell = cells.add_scratch(s);
    if (cell < 0) fail(PSL_ERR_CONTEXT_FULL, "MTP draft: no free KV cell (all %d in use)", cells.size());
    try {
        const int32_t n_kv = kv_.n_kv_for(cells.used_end());
        if (n_kv != graph_kv_) build(n_kv);
        const UBatch ub{1, &token, &pos, &s, &cell, nullptr};
        inputs_.fill(*graph_, ub, cells);
        const float * h = step == 0 ? q.hidden.at(n_past - 1) : q.chain.data();
        ggml_backend_tensor_set(graph_->inp_mtp_h, h, 0, sizeof(float) * (size_t) n_embd_);
        const ggml_status st = ggml_backend_sched_graph_compute(sched_.get(), gf_);
        if (st == GGML_STATUS_ABORTED) {   // psl_context_interrupt: consumed, as by an eval
            interrupt = false;
            fail(PSL_ERR_INTERRUPTED, "MTP draft interrupted");
        }
        if (st != GGML_STATUS_SUCCESS) fail(PSL_ERR_BACKEND, "MTP graph computation failed (ggml status %d)", (int) st);
    } catch (...) {
        cells.drop_scratch(s);
        throw;
    }
    ggml_backend_tensor_get(logits_, out, 0, sizeof(float) * (size_t) m_.hp.n_vocab);
    ggml_backend_tensor_get(graph_->mtp_hidden, q.chain.data(), 0, sizeof(float) * (size_t) n_embd_);
    q.step = step;
    q.past = n_past;
}

}  // namespace psl
