// MTP drafting: the draft steps (what is computed: mtp.h; the block's weights and graphs are
// the architecture's, models/qwen35.cpp).
#include "engine/mtp.h"

#include "error.h"
#include "host/compute_thread.h"
#include "model.h"

#include <algorithm>
#include <cstring>

namespace psl {

MtpState::MtpState(const psl_model & m, KvCache & kv, const RowSpans & spans, std::vector<ggml_backend_t> backends,
                   int32_t n_ctx, int32_t min_rows)
    : m_(m), kv_(kv), spans_(spans), n_ctx_(n_ctx), n_embd_(m.hp.n_embd), n_rows_(std::max(64, min_rows)),
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
    if (!seqs_[s]) seqs_[s] = std::make_unique<Seq>(Seq{HiddenRing(n_embd_, n_rows_), {}, {}, {}, -1});
    return *seqs_[s];
}

void MtpState::clear() {
    for (auto & s : seqs_) s.reset();
}

void MtpState::copy(int32_t src, int32_t dst) {
    if (src == dst) return;
    seqs_[dst] = std::make_unique<Seq>(Seq{seq(src).hidden, {}, {}, {}, -1});   // a draft is the sequence's own
}

int32_t MtpState::hidden_rows(int32_t s, int32_t n, int32_t most) {
    const HiddenRing & h = seq(s).hidden;
    return h.hi() >= n ? std::max(0, std::min({most, n - h.lo(), n_rows_})) : 0;
}

void MtpState::hidden_get(int32_t s, int32_t n, int32_t k, float * dst) {
    for (int32_t i = 0; i < k; ++i) {
        std::memcpy(dst + (size_t) i * n_embd_, seq(s).hidden.at(n - k + i), sizeof(float) * (size_t) n_embd_);
    }
}

void MtpState::hidden_set(int32_t s, int32_t n, int32_t k, const float * src) {
    end_draft(s);
    Seq & q = seq(s);
    q.hidden.clear();
    const int32_t keep = std::min(k, n_rows_);   // a larger ring may have saved more
    if (keep > 0) q.hidden.store(n - keep, keep, src + (size_t) (k - keep) * n_embd_);
}

int32_t MtpState::held(int32_t s) {
    const Seq & q = seq(s);
    const KvCells & cells = kv_.cells();
    const int32_t n = (int32_t) q.depth.size();
    // anything that changed the sequence let its scratch cells go (kv_cells.h)
    return n > 0 && q.past == cells.n_past(s) && cells.n_scratch(s) == n ? n : 0;
}

void MtpState::end_draft(int32_t s) {
    kv_.cells().drop_scratch(s);
    Seq & q = seq(s);
    q.out.clear();
    q.parent.clear();
    q.depth.clear();
    q.past = -1;
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

void MtpState::build(int32_t n_tokens, int32_t n_kv) {
    graph_.reset();
    graph_ctx_.reset();
    graph_kv_ = graph_tokens_ = -1;
    ggml_init_params p = {graph_buf_.size(), graph_buf_.data(), /*no_alloc =*/ true};
    graph_ctx_.reset(ggml_init(p));
    if (!graph_ctx_) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the MTP graph context");
    gf_ = ggml_new_graph_custom(graph_ctx_.get(), graph_size_, false);
    graph_ = std::make_unique<Graph>(graph_ctx_.get(), gf_, m_, kv_, n_tokens, n_kv, Graph::Outputs::All);
    logits_ = m_.arch->build_mtp(*graph_);
    ggml_backend_sched_reset(sched_.get());
    if (!ggml_backend_sched_alloc_graph(sched_.get(), gf_)) fail(PSL_ERR_BACKEND, "cannot allocate the MTP graph");
    graph_kv_ = n_kv;
    graph_tokens_ = n_tokens;
}

void MtpState::draft(int32_t s, int32_t token, int32_t step, std::atomic<bool> & interrupt, float * out) {
    if (step < 0) fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft step %d: steps count from 0", step);
    if (step == 0) {
        end_draft(s);
        const int32_t root = -1;
        run(s, 1, &token, &root, interrupt, out);
        return;
    }
    const int32_t n = held(s);
    if (n == 0 || seq(s).depth[(size_t) n - 1] != step - 1) {
        fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft step %d must follow step %d at the same cache length", step, step - 1);
    }
    const int32_t parent = n - 1;
    run(s, 1, &token, &parent, interrupt, out);
}

void MtpState::draft_nodes(int32_t s, int32_t n, const int32_t * tokens, const int32_t * parents,
                           std::atomic<bool> & interrupt, float * out) {
    if (n < 1 || n > max_batch) fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft nodes: n is %d, must be in [1, %d]", n, max_batch);
    const int32_t h = held(s);
    if (h == 0) fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft nodes need a draft: step 0 first, the cache unchanged since");
    for (int32_t i = 0; i < n; ++i) {
        if (parents[i] < 0 || parents[i] >= h) {
            fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft node %d: parent %d is not a node the draft holds (0..%d)", i,
                 parents[i], h - 1);
        }
    }
    run(s, n, tokens, parents, interrupt, out);
}

// Evaluates n nodes (parents -1: step 0) in one batch; each keeps its output h'.
void MtpState::run(int32_t s, int32_t n, const int32_t * tokens, const int32_t * parents, std::atomic<bool> & interrupt,
                   float * out) {
    KvCells & cells = kv_.cells();
    Seq & q = seq(s);
    const int32_t n_past = cells.n_past(s), h = (int32_t) q.depth.size();
    pos_.resize((size_t) n);
    seq_ids_.assign((size_t) n, s);
    cells_.resize((size_t) n);
    tails_.resize((size_t) n);
    for (int32_t i = 0; i < n; ++i) {
        pos_[i] = n_past + (parents[i] < 0 ? 0 : q.depth[(size_t) parents[i]] + 1);
        if (pos_[i] >= n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "MTP draft at position %d: n_ctx is %d", pos_[i], n_ctx_);
    }
    try {
        for (int32_t i = 0; i < n; ++i) {
            cells_[i] = cells.add_scratch(s, pos_[i]);
            if (cells_[i] < 0) fail(PSL_ERR_CONTEXT_FULL, "MTP draft: no free KV cell (all %d in use)", cells.size());
        }
        const std::vector<int32_t> & node_cell = cells.scratch(s);   // node k's cell: node_cell[k]
        scratch_.resize((size_t) n * n_embd_);
        for (int32_t i = 0; i < n; ++i) {   // the node's path: its ancestors' cells, then its own
            std::vector<int32_t> & tail = tails_[i];
            tail.assign((size_t) (pos_[i] - n_past + 1), -1);
            tail.back() = cells_[i];
            for (int32_t a = parents[i], k = (int32_t) tail.size() - 2; a >= 0; a = q.parent[(size_t) a], --k) {
                tail[(size_t) k] = node_cell[(size_t) a];
            }
            const float * in = parents[i] < 0 ? q.hidden.at(n_past - 1) : q.out.data() + (size_t) parents[i] * n_embd_;
            std::copy(in, in + n_embd_, scratch_.data() + (size_t) i * n_embd_);
        }
        compute(n, tokens, interrupt);
    } catch (...) {
        end_draft(s);
        throw;
    }
    ggml_backend_tensor_get(logits_, out, 0, sizeof(float) * (size_t) n * m_.hp.n_vocab);
    q.out.resize((size_t) (h + n) * n_embd_);
    ggml_backend_tensor_get(graph_->mtp_hidden, q.out.data() + (size_t) h * n_embd_, 0,
                            sizeof(float) * (size_t) n * n_embd_);
    for (int32_t i = 0; i < n; ++i) {
        q.parent.push_back(parents[i]);
        q.depth.push_back(pos_[i] - n_past);
    }
    q.past = n_past;
}

void MtpState::compute(int32_t n, const int32_t * tokens, std::atomic<bool> & interrupt) {
    const int32_t n_kv = kv_.n_kv_for(kv_.cells().used_end());
    if (n_kv != graph_kv_ || n != graph_tokens_) build(n, n_kv);
    UBatch ub{n, tokens, pos_.data(), seq_ids_.data(), cells_.data(), nullptr, tails_.data()};
    if (graph_->inp_pos4) {   // M-RoPE: after an image the nodes' rope positions are not their indices
        rope_.resize(4 * (size_t) n);
        for (int32_t i = 0; i < n; ++i) spans_.rope_pos(seq_ids_[i], pos_[i], &rope_[4 * (size_t) i]);
        ub.rope = rope_.data();
    }
    inputs_.fill(*graph_, ub, kv_.cells());
    ggml_backend_tensor_set(graph_->inp_mtp_h, scratch_.data(), 0, sizeof(float) * (size_t) n * n_embd_);
    const ggml_status st = compute_graph(sched_.get(), gf_);
    if (st == GGML_STATUS_ABORTED) {   // psl_context_interrupt: consumed, as by an eval
        interrupt = false;
        fail(PSL_ERR_INTERRUPTED, "MTP draft interrupted");
    }
    if (st != GGML_STATUS_SUCCESS) fail(PSL_ERR_BACKEND, "MTP graph computation failed (ggml status %d)", (int) st);
}

}  // namespace psl
