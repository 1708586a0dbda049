// MTP ("multi-token prediction", GGUF's NextN layers) drafting from the target's own weights,
// as llama.cpp runs it for qwen35 (src/models/qwen35.cpp graph_mtp, common/speculative.cpp
// draft-mtp); the block's weights and graphs are the architecture's (models/qwen35.cpp,
// ArchOps::build_mtp). At position p the MTP block takes the token x_p and the target's hidden
// state h_{p-1} (the trunk's last layer after the final output norm) and predicts token p + 1:
//   y  = eh_proj([enorm(embed(x_p)); hnorm(h_{p-1})])
//   y += gated_attention(attn_norm(y))       its own KV cache over positions 0..p
//   y += swiglu_ffn(post_attention_norm(y))
//   h' = shared_head_norm(y) (else output_norm); logits = shared_head_head(h') (else the output head)
// The MTP KV cache holds (x_p, h_{p-1}) for every token in the target's cache: the target's eval
// fills it (one more cache layer, so truncation rolls it back with the rest) and keeps its
// hidden rows on the host. A draft is a tree of nodes, numbered as they are evaluated: step 0
// runs (x_{n}, h_{n-1}) at n = n_past (node 0, depth 0); a node with parent P runs its token
// with P's output h' at n + depth(P) + 1, attending to the cache, its ancestors' draft cells and
// itself (a chain is the tree whose step s has the step s-1 node for parent). Every node's
// output h' is kept until the draft ends, so that siblings run from the same state. Its cache
// writes go to scratch cells of the sequence (kv_cells.h), let go before anything else changes
// it: drafted nodes never enter the cache. All of it per sequence: each has its hidden rows and
// its draft.
#pragma once

#include "memory/hidden_ring.h"
#include "memory/kv_cache.h"
#include "memory/row_spans.h"
#include "models/common/graph_common.h"

#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <atomic>
#include <memory>
#include <vector>

namespace psl {

// What it needs from the target's context is given to it: the model, the KV cache (the block
// caches at layer n_layer), the backends to run on; per step, the target's cache length and the
// interrupt flag. The context drives it and nothing here reaches back.
class MtpState {
public:
    // backends: the context's, the CPU last (the draft graph gets a scheduler of its own over
    // them); n_ctx: the context length; min_rows: the hidden rows to keep at least (the
    // recurrent ring's depth + 1); spans: the sequences' images, whose M-RoPE positions the
    // draft nodes after them take too (memory/row_spans.h).
    MtpState(const psl_model & m, KvCache & kv, const RowSpans & spans, std::vector<ggml_backend_t> backends,
             int32_t n_ctx, int32_t min_rows);
    ~MtpState();
    // Around the target's compute of a batch of sequence seq at n_past (g.mtp set).
    void before_compute(const Graph & g, int32_t seq, int32_t n_past);
    void after_compute(const Graph & g, int32_t seq, int32_t n_past);
    void clear();
    // Sequence dst now holds src's first n tokens (shared cells): it takes src's hidden rows.
    void copy(int32_t src, int32_t dst);
    // For a sequence's state or checkpoint (engine/context.cpp): how many of the hidden rows
    // before position n seq keeps (up to `most`, newest last), reading them, and setting them
    // for a sequence of n tokens (the rows of positions n - k .. n - 1).
    int32_t hidden_rows(int32_t s, int32_t n, int32_t most);
    void hidden_get(int32_t s, int32_t n, int32_t k, float * dst);
    void hidden_set(int32_t s, int32_t n, int32_t k, const float * src);
    int32_t n_embd() const { return n_embd_; }
    // One draft step of seq (see the header comment) after its n_past cached tokens (no replay
    // pending): step 0 starts a draft, step s > 0 is a node whose parent is the last node
    // evaluated, which must be at depth s - 1. Logits [n_vocab] into out. A computation stopped
    // by interrupt consumes it; any failure past the checks ends the draft.
    void draft(int32_t seq, int32_t token, int32_t step, std::atomic<bool> & interrupt, float * out);
    // n nodes of seq's draft in one batch, node i the child of node parents[i] (one evaluated
    // before this call); logits [n, n_vocab] into out.
    void draft_nodes(int32_t seq, int32_t n, const int32_t * tokens, const int32_t * parents,
                     std::atomic<bool> & interrupt, float * out);
    static constexpr int32_t max_batch = 512;    // nodes one draft_nodes call may evaluate

private:
    struct Seq {
        HiddenRing hidden;                        // the target's h by position
        std::vector<float> out;                   // each draft node's output h', node order
        std::vector<int32_t> parent, depth;       // each node's parent (-1: step 0's) and depth
        int32_t past = -1;                        // the n_past the draft ran at
    };
    Seq & seq(int32_t s);
    // The nodes seq's draft holds: 0 when none (no step 0 since the sequence last changed).
    int32_t held(int32_t s);
    void end_draft(int32_t s);
    void run(int32_t s, int32_t n, const int32_t * tokens, const int32_t * parents, std::atomic<bool> & interrupt,
             float * out);
    void compute(int32_t n, const int32_t * tokens, std::atomic<bool> & interrupt);
    void build(int32_t n_tokens, int32_t n_kv);

    const psl_model & m_;
    KvCache & kv_;
    const RowSpans & spans_;
    int32_t n_ctx_;
    int32_t n_embd_;
    int32_t n_rows_;                              // hidden rows kept per sequence
    std::vector<std::unique_ptr<Seq>> seqs_;      // made on first use
    std::vector<float> scratch_;
    // a draft batch: positions, sequence ids, cells, each node's tail (kv_cells' scratch cells)
    std::vector<int32_t> pos_, seq_ids_, cells_, rope_;   // rope_: M-RoPE's 4 a node
    std::vector<std::vector<int32_t>> tails_;
    // the draft graph: its own scheduler, so that the target's graph stays allocated
    ggml_backend_sched_ptr sched_;
    size_t graph_size_ = 1024;
    std::vector<uint8_t> graph_buf_;
    ggml_context_ptr graph_ctx_;
    ggml_cgraph * gf_ = nullptr;
    std::unique_ptr<Graph> graph_;
    GraphInputs inputs_;
    ggml_tensor * logits_ = nullptr;
    int32_t graph_kv_ = -1, graph_tokens_ = -1;
};

}  // namespace psl
