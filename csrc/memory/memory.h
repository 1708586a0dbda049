// A context's memory: the KV cache and, for a hybrid model, the recurrent state ring
// (recurrent_state.h), always holding the same tokens. Rollback is the memory's job: truncate
// is O(1) for the KV cache and, within the ring's depth, for the recurrent state too. Further
// back the recurrent state is stale, and the next replay() has the owner evaluate the kept tokens
// again (from an empty cache) before anything else runs.
#pragma once

#include "memory/kv_cache.h"
#include "memory/recurrent_state.h"

#include <functional>
#include <memory>

struct psl_model;

namespace psl {

class Memory {
public:
    // n_ctx: the context length (the KV cache rounds it up to its padding).
    Memory(const psl_model & m, int32_t n_ctx, ggml_type type_k, ggml_type type_v);
    Memory(const Memory &) = delete;
    Memory & operator=(const Memory &) = delete;

    KvCache & kv() { return *kv_; }
    const KvCache & kv() const { return *kv_; }
    RecurrentState * rs() { return rs_.get(); }   // null unless the model is hybrid
    int32_t n_past() const { return kv_->used(); }
    // The deepest truncation that needs no replay: K - 1 with a recurrent state, else n_ctx.
    int32_t max_rollback() const;

    // Around the computation of a batch of n_tokens at n_past(): before it (the ring rows it may
    // overwrite are no longer trusted, also when it then fails half way), and after it succeeded
    // (its tokens join the cache).
    void begin_batch(int32_t n_tokens);
    void end_batch(const int32_t * tokens, int32_t n_tokens);

    // Keeps the first n_keep tokens (PSL_ERR_OUT_OF_RANGE unless 0 <= n_keep <= n_past()).
    void truncate(int32_t n_keep);
    void clear();
    // Everything in the cache must be evaluated again (the next replay() starts from nothing):
    // the tokens kept by the recurrent state, or by the memory itself without one, are the
    // replay's source (an MTP block enabled on a filled cache needs its entries).
    void replay_all();
    // When the recurrent state is stale: empties the cache and calls eval(tokens, n) with the
    // n kept tokens, which the owner evaluates (no logits) to rebuild every layer's memory. If
    // eval throws, the cache is left as it was (still stale: the next call tries again) and the
    // exception goes on.
    void replay(const std::function<void(const int32_t * tokens, int32_t n)> & eval);

private:
    void keep_recurrent(int32_t n_keep);

    std::unique_ptr<KvCache> kv_;
    std::unique_ptr<RecurrentState> rs_;
    int32_t n_ctx_;
    int32_t replay_ = -1;   // >= 0: the recurrent state must be rebuilt up to here
    std::vector<int32_t> history_;   // the tokens in the cache when there is no recurrent state
};

}  // namespace psl
