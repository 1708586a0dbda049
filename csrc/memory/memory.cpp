// A context's memory: the KV cache truncates in O(1); the ring of recurrent states
// (recurrent_state.h) serves recent truncations, and anything further back is rebuilt by
// replaying the kept tokens before the next eval. All of it per sequence.
#include "memory/memory.h"

#include "error.h"
#include "model.h"

#include <algorithm>

namespace psl {

Memory::Memory(const psl_model & m, int32_t n_ctx, int32_t n_seq, ggml_type type_k, ggml_type type_v)
    : n_ctx_(n_ctx), replay_((size_t) n_seq, -1), spans_(n_seq), history_((size_t) n_seq) {
    kv_ = std::make_unique<KvCache>(m, n_ctx, n_seq, type_k, type_v);
    if (m.hp.hybrid()) rs_ = std::make_unique<RecurrentState>(m, recurrent_snapshots(), n_seq);
}

const std::vector<int32_t> & Memory::history(int32_t seq) const { return rs_ ? rs_->history(seq) : history_[seq]; }

int32_t Memory::max_rollback() const { return rs_ ? rs_->n_snap() - 1 : n_ctx_; }

void Memory::begin_batch(int32_t seq, int32_t pos0, int32_t n_tokens) {
    if (rs_) rs_->begin_batch(seq, pos0, n_tokens);
}

void Memory::end_batch(int32_t seq, const int32_t * tokens, int32_t n_tokens) {
    if (rs_) rs_->end_batch(seq, tokens, n_tokens);
}

int32_t Memory::free_cell(const int32_t * seqs, int32_t n, std::vector<int32_t> * moved) {
    KvCells & c = cells();
    int32_t cell = c.find_free(seqs[0]);
    const auto below = [&] { return std::any_of(seqs, seqs + n, [&](int32_t s) { return c.below_last(s, cell); }); };
    if (cell >= 0 && below()) {
        std::vector<int32_t> to = kv_->compact();
        ++compactions_;
        cell = c.find_free(seqs[0]);     // every free cell is above every used one now
        if (moved) *moved = std::move(to);
    }
    if (cell < 0) fail(PSL_ERR_CONTEXT_FULL, "context full: no free KV cell (all %d in use)", c.size());
    return cell;
}

void Memory::truncate(int32_t seq, int32_t n_keep) {
    if (n_keep < 0 || n_keep > n_past(seq)) {
        fail(PSL_ERR_OUT_OF_RANGE, "truncate(%d): sequence %d holds %d tokens", n_keep, seq, n_past(seq));
    }
    check_keep(seq, n_keep, "truncate");
    cells().truncate(seq, n_keep);
    spans_.truncate(seq, n_keep);
    if (rs_) {
        keep_recurrent(seq, n_keep);
    } else {
        history_[seq].resize(n_keep);
        if (replay_[seq] > n_keep) replay_[seq] = n_keep;
        if (replay_[seq] == 0) replay_[seq] = -1;
    }
}

void Memory::copy(int32_t src, int32_t dst, int32_t n) {
    if (n < 0 || n > n_past(src)) {
        fail(PSL_ERR_OUT_OF_RANGE, "copy of %d tokens: sequence %d holds %d", n, src, n_past(src));
    }
    if (src == dst) {
        truncate(dst, n);
        return;
    }
    check_keep(src, n, "copy");
    cells().copy(src, dst, n);
    spans_.copy(src, dst, n);
    if (!rs_) {
        history_[dst].assign(history_[src].begin(), history_[src].begin() + n);
        replay_[dst] = replay_[src] >= 0 ? std::min(replay_[src], n) : -1;
        if (replay_[dst] == 0) replay_[dst] = -1;
        return;
    }
    replay_[dst] = -1;
    if (stale(src)) {   // src's states are being rebuilt: dst rebuilds its part from the history
        rs_->set_history(dst, std::vector<int32_t>(rs_->history(src).begin(), rs_->history(src).begin() + n));
        if (n > 0) replay_[dst] = n;
        return;
    }
    if (!rs_->copy(src, dst, n)) {
        rs_->set_history(dst, std::vector<int32_t>(rs_->history(src).begin(), rs_->history(src).begin() + n));
        replay_[dst] = n;
    }
}

void Memory::clear() {
    cells().clear();
    spans_.clear();
    for (int32_t s = 0; s < n_seq(); ++s) {
        replay_[s] = -1;
        if (rs_) rs_->rollback(s, 0);
        history_[s].clear();
    }
}

// What truncate and copy refuse, before they change anything (memory.h).
void Memory::check_keep(int32_t seq, int32_t n_keep, const char * what) const {
    if (spans_.cuts(seq, n_keep)) {
        fail(PSL_ERR_INVALID_ARGUMENT, "%s to %d tokens would cut an image of sequence %d (its rows at 2-D "
             "positions): keep the whole image or cut before it", what, n_keep, seq);
    }
}

void Memory::keep_recurrent(int32_t seq, int32_t n_keep) {
    if (replay_[seq] >= 0) {   // already stale: the replay just stops earlier
        replay_[seq] = std::min(replay_[seq], n_keep);
        if (replay_[seq] == 0) replay_[seq] = -1, rs_->rollback(seq, 0);
        return;
    }
    if (!rs_->rollback(seq, n_keep)) replay_[seq] = n_keep;
}

void Memory::replay_all() {
    for (int32_t s = 0; s < n_seq(); ++s) {
        if (replay_[s] < 0 && n_past(s) > 0) replay_[s] = n_past(s);
    }
}

void Memory::replay(int32_t seq, const std::function<void(const int32_t * tokens, int32_t n)> & eval) {
    if (replay_[seq] < 0) return;
    const int32_t n = replay_[seq];
    if (spans_.any_below(seq, n)) {
        fail(PSL_ERR_UNSUPPORTED, "sequence %d holds an image: its memory cannot be rebuilt from its tokens "
             "(truncate it before the image)", seq);
    }
    const std::vector<int32_t> & h = rs_ ? rs_->history(seq) : history_[seq];
    std::vector<int32_t> toks(h.begin(), h.begin() + n);
    if (rs_) rs_->rollback(seq, 0);
    if (!rs_) history_[seq].clear();
    try {
        eval(toks.data(), n);
    } catch (...) {
        // still stale: the next call tries again
        if (rs_) rs_->set_history(seq, toks);
        if (!rs_) history_[seq] = toks;
        throw;
    }
    replay_[seq] = -1;
}

}  // namespace psl
