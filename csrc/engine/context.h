// psl_context: a model's memory (memory/memory.h), the backends and their scheduler, and
// decode(batch) -> logits in graphs of at most n_batch tokens, for the tokens of any of its
// sequences (batch.h); eval(tokens) is sequence 0's. MTP drafting and draft heads (sequence 0
// only) ride on it (mtp.h, head.h).
#pragma once

#include "engine/batch.h"
#include "memory/memory.h"
#include "model.h"
#include "models/common/graph_common.h"
#include "pyllamaspec.h"

#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <atomic>
#include <memory>
#include <vector>

namespace psl {
class HeadState;
class MtpState;
}

struct psl_context {
    psl_model * model;                       // holds a reference (psl::retain)
    psl_context_params params;               // with defaults resolved
    std::unique_ptr<psl::Memory> mem;         // KV cache (+ recurrent state): what truncate rolls back
    std::unique_ptr<psl::MtpState> mtp;       // MTP drafting enabled (mtp.h)
    std::unique_ptr<psl::HeadState> draft_head;   // a draft head attached (head.h)
    // Owned handles: members are destroyed in reverse order, so a constructor that throws half
    // way frees what it made (the scheduler before the backends it drives).
    ggml_backend_ptr backend_cpu;
    ggml_backend_ptr backend_gpu;
    std::vector<ggml_backend_ptr> backends_split;   // a split's RPC devices
    ggml_backend_sched_ptr sched;
    size_t graph_size = 0;
    std::vector<uint8_t> graph_buf;          // metadata of the current graph
    ggml_context_ptr graph_ctx;
    ggml_cgraph * gf = nullptr;
    std::unique_ptr<psl::Graph> graph;
    // The current graph is reused, allocation included, while these stay the same.
    int32_t graph_tokens = -1, graph_kv = -1, graph_mode = -1, graph_rows = -1, graph_fa = -1;

    psl::GraphInputs inputs;                 // host buffers of the graph inputs
    std::atomic<bool> interrupt{false};
    bool catch_sigint = false;               // SIGINT interrupts a running eval
    int sigint_mark = 0;
    psl_perf perf{0.0, 0, 0, 0, 0};
    int64_t compactions_base = 0;            // mem->compactions() at the last psl_context_reset_perf
    // A restricted output head (psl_context_set_output_ids, output_head.cpp): room for
    // head->ne[1] rows of which the first head_ids.size() are used (head_packed: in the full
    // head's repacking / AMX buffer, all rows multiplied, the spare ones zero), which ids are in
    // it, and scratch for the restricted logits before they are spread over n_vocab.
    ggml_context_ptr head_ctx;
    ggml_backend_buffer_ptr head_buf;
    ggml_tensor * head = nullptr;
    bool head_packed = false;
    std::vector<int32_t> head_ids;
    std::vector<uint8_t> head_has;
    std::vector<float> head_logits;

    psl_context(psl_model * m, const psl_context_params & p);
    ~psl_context();

    void eval(const int32_t * tokens, int32_t n, int32_t mode, float * out, int64_t out_cap);
    void embed(const int32_t * tokens, int32_t n, float * out, int64_t out_cap);
    void eval_rows(int32_t seq, const float * rows, int32_t n, int32_t width, const int32_t * ids,
                   const psl_rows_layout & layout, int32_t mode, float * out, int64_t out_cap);
    void decode(const psl_batch & batch, float * out, int64_t out_cap);
    void truncate(int32_t seq, int32_t n_keep);
    void copy(int32_t src, int32_t dst, int32_t n);
    size_t seq_state_size(int32_t seq) const;
    void seq_state_get(int32_t seq, uint8_t * dst, size_t cap) const;
    void seq_state_set(int32_t seq, const uint8_t * src, size_t size);
    void check_state(int32_t seq, const char * what) const;
    struct MtpRows {
        int32_t k = 0;
        const uint8_t * data = nullptr;
    };
    size_t mtp_trailer_size(int32_t seq, int32_t most) const;
    void mtp_trailer_get(int32_t seq, int32_t most, uint8_t * dst) const;
    size_t mtp_trailer_check(const uint8_t * src, size_t size, MtpRows & rows) const;
    size_t seq_checkpoint_size(int32_t seq) const;
    void seq_checkpoint_get(int32_t seq, uint8_t * dst, size_t cap) const;
    void seq_checkpoint_set(int32_t seq, const uint8_t * src, size_t size);
    void clear();
    void set_threads(int32_t n);
    void set_output_ids(const int32_t * ids, int32_t n);
    void add_output_ids(const int32_t * ids, int32_t n);
    void enable_mtp();
    void mtp_draft(int32_t seq, int32_t token, int32_t step, float * out, int64_t out_cap);
    void mtp_draft_nodes(int32_t seq, int32_t n, const int32_t * tokens, const int32_t * parents, float * out,
                         int64_t out_cap);
    void check_seq(int32_t seq) const;
    psl::RowSpan rows_span(int32_t seq, int32_t n, const psl_rows_layout & layout) const;
    void check_rows_width(int32_t width) const;
    void check_logits_out(const psl::Batch & b, const float * out, int64_t out_cap) const;
    static std::vector<int8_t> logits_flags(int32_t n, int32_t mode);
    void attach_head(psl_model * h);
    void head_draft(int32_t token, int32_t step, float * out, int64_t out_cap);
    void head_block(int32_t token, int32_t n, float * out, int64_t out_cap);

private:
    void free_head();
    void copy_head_rows(const int32_t * ids, int32_t n, int32_t first_row);
    void read_head_rows(const int32_t * ids, int32_t n, uint8_t * dst) const;
    void build_graph(int32_t n_tokens, int32_t n_kv, psl::Graph::Outputs outputs, int32_t n_rows, bool embd,
                     int32_t fa_rows = 0);
    int32_t fa_rows_for(int32_t n, int32_t n_kv);
    static constexpr int32_t FA_MAX_CHUNKS = 16;
    void run(const psl::Batch & b, bool embd, float * out);
    void compute(const psl::Batch & b, const std::vector<int32_t> & idx, bool rewrite, bool embd, float * out);
    void write_rows(const std::vector<int32_t> & rows, bool consecutive, bool use_head, size_t width, float * out);
    void make_room(const psl::Batch & b);
    void replay(int32_t seq);
    void check_head_seqs(const psl::Batch & b) const;
    bool one_seq_per_graph() const;
    void check_head_call(int32_t token, int32_t n, float * out, int64_t out_cap) const;
    void reserve();
    std::vector<ggml_backend_t> backends() const;   // the scheduler's, the CPU last

    // eval_rows' input while it runs: n x n_embd floats in place of the tokens' embeddings
    const float * rows_in_ = nullptr;
    bool rows_non_causal_ = false;
    int32_t rows_draft_token_ = 0;          // psl_rows_layout::draft_token: what a draft head sees there
    std::vector<int32_t> head_tokens_;      // a draft head's tokens for a batch of rows
    // scratch of compute(): the graph's tokens, positions, sequences, cells, output rows
    std::vector<int32_t> ub_tokens_, ub_pos_, ub_seq_, ub_cell_, ub_out_, ub_rows_;
    std::vector<int32_t> ub_rope_;           // scratch of compute(): M-RoPE positions, 4 a token (row_spans.h)
    std::vector<int32_t> moved_;             // scratch of compute(): old cell -> new after a compaction
    std::vector<int32_t> fa_seq_rows_;       // scratch of fa_rows_for(): the graph's rows by sequence
};
