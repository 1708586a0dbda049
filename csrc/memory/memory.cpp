// A context's memory: the KV cache truncates in O(1); the ring of recurrent states
// (recurrent_state.h) serves recent truncations, and anything further back is rebuilt by
// replaying the kept tokens before the next eval.
#include "memory/memory.h"

#include "error.h"
#include "model.h"

#include <algorithm>

namespace psl {

Memory::Memory(const psl_model & m, int32_t n_ctx, ggml_type type_k, ggml_type type_v) : n_ctx_(n_ctx) {
    kv_ = std::make_unique<KvCache>(m, n_ctx, type_k, type_v);
    if (m.hp.hybrid()) rs_ = std::make_unique<RecurrentState>(m, recurrent_snapshots());
}

int32_t Memory::max_rollback() const { return rs_ ? rs_->n_snap() - 1 : n_ctx_; }

void Memory::begin_batch(int32_t n_tokens) {
    if (rs_) rs_->begin_batch(kv_->used(), n_tokens);
}

void Memory::end_batch(const int32_t * tokens, int32_t n_tokens) {
    kv_->set_used(kv_->used() + n_tokens);
    if (rs_) {
        rs_->end_batch(tokens, n_tokens);
    } else {
        history_.insert(history_.end(), tokens, tokens + n_tokens);
    }
}

void Memory::truncate(int32_t n_keep) {
    if (n_keep < 0 || n_keep > kv_->used()) {
        fail(PSL_ERR_OUT_OF_RANGE, "truncate(%d): the cache holds %d tokens", n_keep, kv_->used());
    }
    kv_->set_used(n_keep);
    if (rs_) keep_recurrent(n_keep);
    if (!rs_) {
        history_.resize(n_keep);
        if (replay_ > n_keep) replay_ = n_keep;
    }
}

void Memory::clear() {
    kv_->clear();
    if (rs_) keep_recurrent(0);
    if (!rs_) history_.clear(), replay_ = -1;
}

void Memory::keep_recurrent(int32_t n_keep) {
    if (replay_ >= 0) {   // already stale: the replay just stops earlier
        replay_ = std::min(replay_, n_keep);
        if (replay_ == 0) replay_ = -1, rs_->rollback(0);
        return;
    }
    if (!rs_->rollback(n_keep)) replay_ = n_keep;
}

void Memory::replay_all() {
    if (replay_ < 0) replay_ = kv_->used();
}

void Memory::replay(const std::function<void(const int32_t * tokens, int32_t n)> & eval) {
    if (replay_ < 0) return;
    const int32_t n = replay_;
    const std::vector<int32_t> & h = rs_ ? rs_->history() : history_;
    std::vector<int32_t> toks(h.begin(), h.begin() + n);
    kv_->set_used(0);
    if (rs_) rs_->rollback(0);
    if (!rs_) history_.clear();
    try {
        eval(toks.data(), n);
    } catch (...) {
        kv_->set_used(n);   // still stale: the next call tries again
        if (rs_) rs_->set_history(toks);
        if (!rs_) history_ = toks;
        throw;
    }
    replay_ = -1;
}

}  // namespace psl
