// Draft heads attached to a target's context: the graph runner, the checks that a head fits
// its target, the features a target batch leaves (what is computed: head.h).
#include "engine/head.h"

#include "error.h"
#include "host/compute_thread.h"
#include "model.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace psl {

// ---- HeadGraph ----

HeadGraph::HeadGraph(const std::vector<ggml_backend_t> & backends) {
    buf_.resize(ggml_tensor_overhead() * graph_size_ + ggml_graph_overhead_custom(graph_size_, false));
    std::vector<ggml_backend_t> b = backends;
    sched_.reset(ggml_backend_sched_new(b.data(), nullptr, (int) b.size(), graph_size_, false, true));
    if (!sched_) fail(PSL_ERR_BACKEND, "cannot create a draft head's scheduler");
}

HeadGraph::~HeadGraph() {
    sched_.reset();
    graph_.reset();
    ctx_.reset();
}

Graph & HeadGraph::prepare(int64_t key, const psl_model & m, const psl_model & target, KvCache & kv, int32_t n_tokens,
                           int32_t n_kv, bool outputs, bool causal, const std::function<ggml_tensor *(Graph &)> & build) {
    if (key == key_ && graph_) return *graph_;
    key_ = -1;
    graph_.reset();
    ctx_.reset();
    ggml_init_params p = {buf_.size(), buf_.data(), /*no_alloc =*/ true};
    ctx_.reset(ggml_init(p));
    if (!ctx_) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create a draft head's graph context");
    ggml_cgraph * gf = ggml_new_graph_custom(ctx_.get(), graph_size_, false);
    graph_ = std::make_unique<Graph>(ctx_.get(), gf, m, kv, n_tokens, n_kv, outputs ? Graph::Outputs::All : Graph::Outputs::None);
    graph_->causal = causal;
    graph_->other = &target;
    result_ = build(*graph_);
    ggml_build_forward_expand(gf, result_);
    if (graph_->hidden) ggml_build_forward_expand(gf, graph_->hidden);
    ggml_backend_sched_reset(sched_.get());
    if (!ggml_backend_sched_alloc_graph(sched_.get(), gf)) fail(PSL_ERR_BACKEND, "cannot allocate a draft head's graph");
    key_ = key;
    return *graph_;
}

void HeadGraph::compute(std::atomic<bool> & interrupt) {
    const ggml_status st = compute_graph(sched_.get(), graph_->gf);
    if (st == GGML_STATUS_ABORTED) {   // psl_context_interrupt: consumed, as by an eval
        interrupt = false;
        fail(PSL_ERR_INTERRUPTED, "draft head interrupted");
    }
    if (st != GGML_STATUS_SUCCESS) fail(PSL_ERR_BACKEND, "draft head computation failed (ggml status %d)", (int) st);
}

// ---- HeadState ----

namespace {

// A Gemma 4 assistant attends over its target's last window layer's cache and its last full
// layer's: they must be there, with the head sizes it has, and kv heads its q heads share.
void check_shared_kv(const psl_model & head, const psl_model & target) {
    const HParams & h = head.hp, & t = target.hp;
    const int32_t full = t.n_layer - 1, swa = t.n_layer - 2;
    if (target.arch_name != "gemma4" || t.n_layer < 2 || t.is_swa(full) || !t.is_swa(swa)) {
        fail(PSL_ERR_UNSUPPORTED, "a Gemma 4 assistant drafts for a gemma4 target whose last layer attends fully and the one "
             "before over a window (got %s)", target.arch_name.c_str());
    }
    for (int il = 0; il < h.n_layer; ++il) {
        const int32_t tl = h.is_swa(il) ? swa : full;
        const int32_t kv_heads = target.layers.empty() ? 0 : t.head_count_kv(t.kv_source(tl));
        if (h.head_k(il) != t.head_k(tl) || kv_heads <= 0 || h.head_count(il) % kv_heads != 0) {
            fail(PSL_ERR_UNSUPPORTED, "assistant layer %d (head size %d, %d heads) cannot attend over target layer %d's cache "
                 "(head size %d, %d kv heads)", il, h.head_k(il), h.head_count(il), tl, t.head_k(tl), kv_heads);
        }
    }
}

void check_fit(const psl_model & head, const psl_model & target) {
    const HParams & h = head.hp, & t = target.hp;
    const char * kind = head.arch_name.c_str();
    if (target.stub || !target.tok_embd) fail(PSL_ERR_UNSUPPORTED, "a %s head needs a target whose weights are loaded here", kind);
    if (h.head.n_embd_target != t.n_embd) {
        fail(PSL_ERR_UNSUPPORTED, "the %s head reads hidden states %d wide; the target's (%s) are %d wide", kind,
             h.head.n_embd_target, target.arch_name.c_str(), t.n_embd);
    }
    for (int32_t id : h.head.target_layers) {
        if (id >= t.n_layer) {
            fail(PSL_ERR_UNSUPPORTED, "the %s head reads the input of target layer %d; the target has %d layers (ids 0..%d: "
                 "a layer id names that layer's input, and %d, the output of the last one, is not one)",
                 kind, id, t.n_layer, t.n_layer - 1, t.n_layer);
        }
    }
    if (h.n_vocab != t.n_vocab) {
        fail(PSL_ERR_UNSUPPORTED, "the %s head's vocabulary has %d tokens, the target's %d", kind, h.n_vocab, t.n_vocab);
    }
    if (!head.tok_embd && target.tok_embd->ne[0] != h.n_embd) {
        fail(PSL_ERR_UNSUPPORTED, "the %s head has no token embeddings of its own, and the target's are %lld wide, not %d",
             kind, (long long) target.tok_embd->ne[0], h.n_embd);
    }
    const int64_t n_out = h.head.d2t.empty() ? h.n_vocab : (int64_t) h.head.d2t.size();
    if (!head.output && (target.output->ne[0] != h.n_embd || target.output->ne[1] != n_out)) {
        fail(PSL_ERR_UNSUPPORTED, "the %s head has no output head of its own, and the target's is [%lld, %lld], not [%d, %lld]",
             kind, (long long) target.output->ne[0], (long long) target.output->ne[1], h.n_embd, (long long) n_out);
    }
    if (h.head.mask_token >= t.n_vocab) fail(PSL_ERR_UNSUPPORTED, "the %s head's mask token %d is outside the vocabulary", kind, h.head.mask_token);
    if (head.arch->reads_target_kv) check_shared_kv(head, target);
    if (head.dev_gpu && !target.dev_gpu) {
        fail(PSL_ERR_UNSUPPORTED, "the %s head has layers on a GPU and the target none: load the head with n_gpu_layers=0", kind);
    }
}

}  // namespace

std::unique_ptr<HeadState> HeadState::make(psl_model & head, const psl_model & target, KvCache & target_kv,
                                           const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                           ggml_type type_k, ggml_type type_v) {
    if (!head.arch || !head.arch->is_head()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "'%s' (%s) is not a draft head (eagle3, dflash, gemma4-assistant)",
             head.file ? head.file->path().c_str() : "?", head.arch_name.c_str());
    }
    check_fit(head, target);
    if (head.arch->reads_target_kv) return make_assistant_state(head, target, target_kv, backends, n_ctx);
    if (head.arch_name == "eagle3") return make_eagle3_state(head, target, backends, n_ctx, type_k, type_v);
    return make_dflash_state(head, target, backends, n_ctx, type_k, type_v);
}

HeadState::HeadState(psl_model & head, const psl_model & target, int32_t n_ctx, bool own_cache, ggml_type type_k,
                     ggml_type type_v)
    : head_(head), target_(target), n_ctx_(n_ctx),
      kv_(own_cache ? std::make_unique<KvCache>(head, n_ctx, 1, type_k, type_v) : nullptr) {
    retain(&head_);
}

HeadState::~HeadState() { release(&head_); }

const std::vector<int32_t> & HeadState::layers() const { return head_.hp.head.target_layers; }

int64_t HeadState::n_out() const {
    return head_.hp.head.d2t.empty() ? head_.hp.n_vocab : (int64_t) head_.hp.head.d2t.size();
}

void HeadState::after_compute(const Graph & g, const int32_t * tokens, int32_t n_past, std::atomic<bool> & interrupt) {
    const std::vector<int32_t> & ids = layers();
    const int64_t n_embd = target_.hp.n_embd, width = (int64_t) ids.size() * n_embd, n = g.n_tokens;
    features_.resize((size_t) (width * n));
    scratch_.resize((size_t) (n_embd * n));
    for (size_t k = 0; k < ids.size(); ++k) {
        const ggml_tensor * t = k < g.captured.size() ? g.captured[k] : nullptr;
        if (!t || t->ne[0] != n_embd || t->ne[1] != n || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
            fail(PSL_ERR_INTERNAL, "the target's graph kept no input of layer %d for the draft head", ids[k]);
        }
        ggml_backend_tensor_get(t, scratch_.data(), 0, ggml_nbytes(t));
        for (int64_t i = 0; i < n; ++i) {
            std::memcpy(features_.data() + i * width + (int64_t) k * n_embd, scratch_.data() + i * n_embd,
                        sizeof(float) * (size_t) n_embd);
        }
    }
    process(features_.data(), tokens, (int32_t) n, n_past, interrupt);
}

void HeadState::spread(const float * rows, int64_t n_rows, float * out) const {
    const std::vector<int32_t> & d2t = head_.hp.head.d2t;
    const int64_t n_vocab = head_.hp.n_vocab;
    if (d2t.empty()) {
        std::memcpy(out, rows, sizeof(float) * (size_t) (n_rows * n_vocab));
        return;
    }
    const int64_t n_sub = (int64_t) d2t.size();
    for (int64_t r = 0; r < n_rows; ++r) {
        float * dst = out + r * n_vocab;
        std::fill(dst, dst + n_vocab, -INFINITY);
        for (int64_t j = 0; j < n_sub; ++j) dst[d2t[j]] = rows[r * n_sub + j];
    }
}

void HeadState::draft(int32_t, int32_t, int32_t, std::atomic<bool> &, float *) {
    fail(PSL_ERR_INVALID_ARGUMENT, "a %s head drafts a block (psl_context_head_block), not chained steps", head_.arch_name.c_str());
}

void HeadState::draft_block(int32_t, int32_t, int32_t, std::atomic<bool> &, float *) {
    fail(PSL_ERR_INVALID_ARGUMENT, "a %s head drafts chained steps (psl_context_head_draft), not a block", head_.arch_name.c_str());
}

}  // namespace psl
