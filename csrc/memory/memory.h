// A context's memory: the KV cache and, for a hybrid model, the recurrent state rings
// (recurrent_state.h), always holding the same tokens, per sequence. Rollback is the memory's
// job: truncate is O(1) for the KV cache and, within the ring's depth, for the recurrent state
// too. Further back the sequence's recurrent state is stale, and the next replay() has the owner
// evaluate its kept tokens again (from an empty sequence) before anything else runs on it.
#pragma once

#include "memory/kv_cache.h"
#include "memory/recurrent_state.h"
#include "memory/row_spans.h"

#include <functional>
#include <memory>

struct psl_model;

namespace psl {

class Memory {
public:
    // n_ctx: the context length (the KV cache rounds it up to its padding); n_seq: the
    // sequences it holds (ids 0 .. n_seq - 1).
    Memory(const psl_model & m, int32_t n_ctx, int32_t n_seq, ggml_type type_k, ggml_type type_v);
    Memory(const Memory &) = delete;
    Memory & operator=(const Memory &) = delete;

    KvCache & kv() { return *kv_; }
    const KvCache & kv() const { return *kv_; }
    KvCells & cells() { return kv_->cells(); }
    const KvCells & cells() const { return kv_->cells(); }
    RecurrentState * rs() { return rs_.get(); }   // null unless the model is hybrid
    int32_t n_seq() const { return cells().n_seq(); }
    int32_t n_past(int32_t seq = 0) const { return cells().n_past(seq); }
    // The deepest truncation that needs no replay: K - 1 with a recurrent state, else n_ctx.
    int32_t max_rollback() const;

    // Around the computation of n tokens of one sequence at positions pos0.. (a hybrid's
    // batches hold one sequence each; their cells are already the sequence's): before it (the
    // ring rows it may overwrite are no longer trusted, also when it then fails half way), and
    // after it succeeded (its tokens join the history).
    void begin_batch(int32_t seq, int32_t pos0, int32_t n_tokens);
    void end_batch(int32_t seq, const int32_t * tokens, int32_t n_tokens);
    // Without a recurrent state: token joins seq's history (the replay source), after its batch
    // succeeded.
    void add_history(int32_t seq, int32_t token) { history_[seq].push_back(token); }

    // A free cell for the next token of seqs[0..n) (KvCells::find_free for seqs[0], which the
    // others continue at the same position), above each one's last cell: ggml's attention sums a
    // sequence's cells in their order, which so stays its positions' order, as in a cache of its
    // own. When no free cell lies above, the cache is compacted first (KvCache::compact) and
    // `moved` (if not null) gets old cell -> new, for the cells the caller holds.
    // PSL_ERR_CONTEXT_FULL when no cell is free.
    int32_t free_cell(const int32_t * seqs, int32_t n, std::vector<int32_t> * moved);
    int64_t compactions() const { return compactions_; }
    // Where seq's images lie and the M-RoPE positions they change (row_spans.h).
    RowSpans & spans() { return spans_; }
    const RowSpans & spans() const { return spans_; }
    // Keeps the first n_keep tokens of seq (PSL_ERR_OUT_OF_RANGE unless 0 <= n_keep <= n_past).
    // A cut inside an image placed 2-D is PSL_ERR_INVALID_ARGUMENT, the sequence unchanged. (A
    // hybrid cut deeper than its ring over an image goes stale as any: its replay() then fails,
    // PSL_ERR_UNSUPPORTED, as an image's rows are no tokens to evaluate again, until a checkpoint
    // or a cut before the image.)
    void truncate(int32_t seq, int32_t n_keep);
    // dst holds src's first n tokens (PSL_ERR_OUT_OF_RANGE unless 0 <= n <= n_past(src)): the
    // KV cells are shared, a recurrent state is copied (or replayed, beyond the ring).
    void copy(int32_t src, int32_t dst, int32_t n);
    void clear();
    // Everything in the cache must be evaluated again (the next replay() of each sequence starts
    // from nothing): the tokens kept by the recurrent state, or by the memory itself without one,
    // are the replay's source (an MTP block enabled on a filled cache needs its entries).
    void replay_all();
    bool stale(int32_t seq) const { return replay_[seq] >= 0; }
    // When seq's recurrent state is stale: calls eval(tokens, n) with its n kept tokens, which
    // the owner evaluates again in the cells they have (no logits) to rebuild every layer's
    // memory. If eval throws, the sequence is left as it was (still stale: the next call tries
    // again) and the exception goes on.
    void replay(int32_t seq, const std::function<void(const int32_t * tokens, int32_t n)> & eval);

    // seq's state as bytes (seq_state.cpp): its tokens, their K/V rows and a hybrid's recurrent
    // states. state_set replaces seq with a state of this layout (another model's or cache
    // type's is refused, seq unchanged).
    size_t state_size(int32_t seq) const;
    void state_get(int32_t seq, uint8_t * dst, size_t cap) const;
    void state_set(int32_t seq, const uint8_t * src, size_t size);
    // A hybrid's checkpoint of seq (seq_state.cpp): its recurrent state after its last position
    // and a hash of its tokens. checkpoint_set: seq, cut back to that position, takes it (no
    // replay then); another model's, position's or text's is refused, seq unchanged.
    size_t checkpoint_size(int32_t seq) const;
    void checkpoint_get(int32_t seq, uint8_t * dst, size_t cap) const;
    void checkpoint_set(int32_t seq, const uint8_t * src, size_t size);
    // seq's tokens (the replay source: the recurrent state's history for a hybrid).
    const std::vector<int32_t> & history(int32_t seq) const;

private:
    int32_t state_rs_rows(int32_t seq) const;   // the recurrent states a saved state of seq holds
    void keep_recurrent(int32_t seq, int32_t n_keep);
    void check_keep(int32_t seq, int32_t n_keep, const char * what) const;

    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<RecurrentState> rs_;
    int32_t n_ctx_;
    int64_t compactions_ = 0;
    std::vector<int32_t> replay_;   // by sequence, >= 0: its memory must be rebuilt up to here
    RowSpans spans_;
    std::vector<std::vector<int32_t>> history_;   // by sequence: its tokens, when there is no recurrent state
};

}  // namespace psl
