// MTP drafting: the draft steps (what is computed: mtp.h; the block's weights and graphs are
// the architecture's, models/qwen35.cpp).
#include "engine/mtp.h"

#include "engine/context.h"
#include "api/error.h"
#include "model.h"

#include <algorithm>
#include <cstring>

namespace psl {

MtpState::MtpState(psl_context & c)
    : c_(c), n_embd_(c.model->hp.n_embd), ring_n_(std::max(64, c.mem->rs() ? c.mem->rs()->n_snap() + 1 : 64)) {
    if (c.model->mtp_layer < 0 || !c.model->arch->build_mtp) fail(PSL_ERR_UNSUPPORTED, "the model has no MTP (nextn) layers to draft with");
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
    logits_ = c_.model->arch->build_mtp(*graph_);
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
