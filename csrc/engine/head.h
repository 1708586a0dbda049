// Draft heads (EAGLE-3, DFlash) attached to a target's context: small models of their own
// (models/eagle3.cpp, models/dflash.cpp) that draft from the target's hidden states, the inputs
// of the target layers the head names. The target's graph keeps those rows (Graph::capture)
// whenever it evaluates, so verification stays one target eval; after each batch the head
// processes them at once, as llama.cpp's common_speculative_process does:
// * EAGLE-3 (head_eagle3.cpp): its cache at position P pairs the token at P + 1 with the fused
//   features g of P, so a batch fills the entries up to its second-to-last position and leaves
//   the last one to the next batch or to the first draft step, which pairs it with the token
//   fed next; step s chains the previous step's token and pre-norm state.
// * DFlash (head_dflash.cpp): the fused features of every position become K/V in its cache;
//   a draft is one pass over [last token, mask, ...] after the target's cache.
// * Gemma 4's assistant (head_assistant.cpp): no cache of its own; each chained step attends
//   over the target's cache, from the target's final normed hidden rows.
// A head has its own KV cache and scheduler over the target's backends; the target's truncation
// and clearing reach it through the context.
#pragma once

#include "memory/kv_cache.h"
#include "models/common/graph_common.h"

#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

namespace psl {

// One graph of a head at a time: built when its shape changes, allocated by its own scheduler
// (the target's graph stays allocated), computed with the target's interrupt.
class HeadGraph {
public:
    explicit HeadGraph(const std::vector<ggml_backend_t> & backends);
    ~HeadGraph();
    // The graph for `key` (built by `build` on a Graph of n_tokens over n_kv cells when the key
    // differs from the last one); its inputs are for the caller to fill.
    Graph & prepare(int64_t key, const psl_model & m, const psl_model & target, KvCache & kv, int32_t n_tokens,
                    int32_t n_kv, bool outputs, bool causal, const std::function<ggml_tensor *(Graph &)> & build);
    void compute(std::atomic<bool> & interrupt);
    ggml_tensor * result() const { return result_; }
    ggml_tensor * hidden() const { return graph_->hidden; }
    GraphInputs & inputs() { return inputs_; }

private:
    ggml_backend_sched_ptr sched_;
    size_t graph_size_ = 4096;
    std::vector<uint8_t> buf_;
    ggml_context_ptr ctx_;
    std::unique_ptr<Graph> graph_;
    ggml_tensor * result_ = nullptr;
    GraphInputs inputs_;
    int64_t key_ = -1;
};

class HeadState {
public:
    // Checks that `head` fits `target` (hidden size, layer ids, vocabulary), PSL_ERR_UNSUPPORTED
    // naming the misfit otherwise. backends: the target context's, the CPU last.
    // target_kv: the target's cache (a Gemma 4 assistant attends over it).
    static std::unique_ptr<HeadState> make(psl_model & head, const psl_model & target, KvCache & target_kv,
                                           const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                           ggml_type type_k, ggml_type type_v);
    virtual ~HeadState();

    // The target layers whose inputs the target keeps for it.
    const std::vector<int32_t> & layers() const;
    // Whether the target keeps its final normed hidden rows for it (Graph::keep_final).
    virtual bool wants_final() const { return false; }
    // The target computed n tokens at n_past in g (g.captured holds their layer inputs).
    virtual void after_compute(const Graph & g, const int32_t * tokens, int32_t n_past, std::atomic<bool> & interrupt);
    virtual void truncate(int32_t n_keep) = 0;
    virtual void clear() = 0;
    // EAGLE-3: one chained draft step (step 0: `token` is the one after the target's n_past
    // cached tokens) -> n_vocab logits. DFlash: a block of n mask positions after `token` ->
    // n rows of n_vocab logits. Each refuses the other's call.
    virtual void draft(int32_t token, int32_t step, int32_t n_past, std::atomic<bool> & interrupt, float * out);
    virtual void draft_block(int32_t token, int32_t n, int32_t n_past, std::atomic<bool> & interrupt, float * out);
    const psl_model & head() const { return head_; }

protected:
    // own_cache: the head keeps a KV cache of its own (type_k/type_v), else it reads its target's
    HeadState(psl_model & head, const psl_model & target, int32_t n_ctx, bool own_cache, ggml_type type_k,
              ggml_type type_v);
    // The features of n target positions from n_past on ([n_ids * n_embd_target] rows).
    virtual void process(const float * features, const int32_t * tokens, int32_t n, int32_t n_past,
                         std::atomic<bool> & interrupt) = 0;
    // Logits of the head's output rows (the draft vocabulary) onto the target's vocabulary.
    void spread(const float * rows, int64_t n_rows, float * out) const;
    int64_t n_out() const;   // rows of the head's output

    psl_model & head_;
    const psl_model & target_;
    int32_t n_ctx_;
    std::unique_ptr<KvCache> kv_;
    std::vector<float> features_, scratch_;
};

std::unique_ptr<HeadState> make_eagle3_state(psl_model & head, const psl_model & target,
                                             const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                             ggml_type type_k, ggml_type type_v);
std::unique_ptr<HeadState> make_dflash_state(psl_model & head, const psl_model & target,
                                             const std::vector<ggml_backend_t> & backends, int32_t n_ctx,
                                             ggml_type type_k, ggml_type type_v);
std::unique_ptr<HeadState> make_assistant_state(psl_model & head, const psl_model & target, KvCache & target_kv,
                                                const std::vector<ggml_backend_t> & backends, int32_t n_ctx);

}  // namespace psl
