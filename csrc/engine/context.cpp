// A context: the KV cache, the backend scheduler and eval(tokens) → logits, split into
// graphs of at most n_batch tokens.
#include "engine/context.h"
#include "engine/head.h"
#include "engine/mtp.h"
#include "engine/thread_budget.h"

#include "error.h"
#include "host/compute_thread.h"
#include "kernels/matmul_rows.h"
#include "models/common/graph_common.h"

#include "ggml-cpu.h"
#include "gguf.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

using namespace psl;

namespace {

void check_threads(int32_t n) {
    if (n < 0 || n > psl::max_threads()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "n_threads must be in [0, %d] (0 = default), got %d", psl::max_threads(), n);
    }
}

int32_t default_threads() {
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 4 : (int32_t) std::min(hw, 16u);
}

bool is_kv_type(int32_t t) {
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 || t == GGML_TYPE_Q8_0 ||
           t == GGML_TYPE_Q4_0 || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1;
}

// PSL_KV_AUTO: F32 where every layer's cache sits in CPU memory and an F32 cache of n_ctx cells
// takes at most PSL_KV_AUTO_F32_MAX_MIB MiB, else F16. Why: ggml's CPU flash attention
// accumulates an F16 V in F16, converting at every cell, and runs about twice as fast on F32
// (SmolLM2, 2 threads: one sequence at 300 context tokens 107 against 53-61 t/s, four decoded
// together 230-242 against 170-173), at twice the cache's memory. On a GPU F16 stays.
int32_t auto_kv_type(const psl_model & m, int32_t n_ctx) {
    const HParams & hp = m.hp;
    uint64_t row_bytes = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        if (hp.is_recurrent(il) || hp.kv_source(il) != il) continue;
        if (ggml_backend_dev_type(m.layer_device(il)) != GGML_BACKEND_DEVICE_TYPE_CPU) return GGML_TYPE_F16;
        row_bytes += (uint64_t) (hp.kv_k_width(il) + hp.kv_v_width(il)) * sizeof(float);
    }
    const uint64_t most = (uint64_t) PSL_KV_AUTO_F32_MAX_MIB << 20;
    return row_bytes * (uint64_t) n_ctx <= most ? GGML_TYPE_F32 : GGML_TYPE_F16;
}

// Ctrl-C during an eval: while a context that asked for it evaluates, our SIGINT handler counts
// the signal (the compute loop polls the count and stops) and passes it on to the handler it
// replaced, so Python still raises KeyboardInterrupt once the call returns.
std::atomic<int> g_sigint_count{0};
#ifndef _WIN32
std::mutex g_sig_mu;
int g_sig_users = 0;
struct sigaction g_prev_sa;

void on_sigint(int sig) {
    g_sigint_count.fetch_add(1);
    if (!(g_prev_sa.sa_flags & SA_SIGINFO) && g_prev_sa.sa_handler != SIG_DFL && g_prev_sa.sa_handler != SIG_IGN) {
        g_prev_sa.sa_handler(sig);
    }
}

struct SigintScope {
    bool on;
    explicit SigintScope(bool enable) : on(enable) {
        if (!on) return;
        std::lock_guard<std::mutex> lock(g_sig_mu);
        if (g_sig_users++ == 0) {
            struct sigaction sa {};
            sa.sa_handler = on_sigint;
            sigemptyset(&sa.sa_mask);
            sigaction(SIGINT, &sa, &g_prev_sa);
        }
    }
    ~SigintScope() {
        if (!on) return;
        std::lock_guard<std::mutex> lock(g_sig_mu);
        if (--g_sig_users == 0) sigaction(SIGINT, &g_prev_sa, nullptr);
    }
};
#else
struct SigintScope {
    explicit SigintScope(bool) {}
};
#endif

bool abort_requested(void * data) {
    const auto * ctx = static_cast<psl_context *>(data);
    return ctx->interrupt.load() || g_sigint_count.load() != ctx->sigint_mark;
}

}  // namespace

int32_t psl::max_threads() {
    const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    return (int32_t) std::min(4u * hw, 512u);
}

psl_context::psl_context(psl_model * m, const psl_context_params & p) : model(m), params(p) {
    const HParams & hp = m->hp;
    if (p.n_ctx < 0 || p.n_batch < 0 || p.n_threads < 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "n_ctx, n_batch and n_threads must be >= 0 (got %d, %d, %d)", p.n_ctx,
             p.n_batch, p.n_threads);
    }
    if (p.n_ctx > (1 << 22)) fail(PSL_ERR_INVALID_ARGUMENT, "n_ctx %d is too large (at most %d)", p.n_ctx, 1 << 22);
    check_threads(p.n_threads);
    params.n_ctx = p.n_ctx > 0 ? p.n_ctx : std::min(hp.n_ctx_train, 4096);
    if (p.type_k == PSL_KV_AUTO && p.type_v == PSL_KV_AUTO) {
        params.type_k = params.type_v = auto_kv_type(*m, params.n_ctx);
    } else if (p.type_k == PSL_KV_AUTO || p.type_v == PSL_KV_AUTO) {   // follows the type given
        params.type_k = params.type_v = p.type_k == PSL_KV_AUTO ? p.type_v : p.type_k;
    }
    if (!is_kv_type(params.type_k) || !is_kv_type(params.type_v)) {
        fail(PSL_ERR_INVALID_ARGUMENT, "unsupported KV cache type (k %d, v %d): use auto (-1), f32 (0), f16 (1), "
             "bf16 (30), q8_0 (8), q4_0 (2), q4_1 (3), q5_0 (6) or q5_1 (7)", p.type_k, p.type_v);
    }
    for (int il = 0; il < hp.n_layer; ++il) {   // every layer's heads: window layers may have their own size
        if (hp.head_k(il) % ggml_blck_size((ggml_type) params.type_k) != 0 ||
            hp.head_v(il) % ggml_blck_size((ggml_type) params.type_v) != 0) {
            fail(PSL_ERR_INVALID_ARGUMENT, "KV cache type %s/%s needs head sizes that are multiples of its block "
                 "(layer %d: %d/%d)", ggml_type_name((ggml_type) params.type_k),
                 ggml_type_name((ggml_type) params.type_v), il, hp.head_k(il), hp.head_v(il));
        }
    }
    params.n_batch = std::min(p.n_batch > 0 ? p.n_batch : 512, params.n_ctx);
    params.n_threads = p.n_threads > 0 ? p.n_threads : default_threads();
    if (p.n_seq_max < 0 || p.n_seq_max > PSL_SEQ_MAX) {
        fail(PSL_ERR_INVALID_ARGUMENT, "n_seq_max must be in [0, %d] (0 = default), got %d", PSL_SEQ_MAX, p.n_seq_max);
    }
    // a sequence costs a KV cache nothing until it holds tokens, a recurrent state a ring each
    params.n_seq_max = p.n_seq_max > 0 ? p.n_seq_max : hp.hybrid() ? 1 : PSL_SEQ_MAX;

    mem = std::make_unique<Memory>(*m, params.n_ctx, params.n_seq_max, (ggml_type) params.type_k,
                                  (ggml_type) params.type_v);

    backend_cpu.reset(ggml_backend_dev_init(m->dev_cpu, nullptr));
    if (!backend_cpu) fail(PSL_ERR_BACKEND, "cannot start the CPU backend");
    ggml_backend_cpu_set_n_threads(backend_cpu.get(), params.n_threads);
    ggml_backend_cpu_set_abort_callback(backend_cpu.get(), abort_requested, this);
    // deterministic: ggml's reference paths at every batch size (no llamafile sgemm, tiled
    // products or flash attention, no split of one row's cells over threads, no fused ops)
    ggml_backend_cpu_set_use_ref(backend_cpu.get(), m->deterministic);
    std::vector<ggml_backend_t> backends;
    if (m->dev_gpu) {
        backend_gpu.reset(ggml_backend_dev_init(m->dev_gpu, nullptr));
        if (!backend_gpu) fail(PSL_ERR_BACKEND, "cannot start the %s backend", ggml_backend_dev_name(m->dev_gpu));
        backends.push_back(backend_gpu.get());
    }
    for (ggml_backend_dev_t dev : m->offload_devices()) {   // a split's other devices (RPC servers)
        if (dev == m->dev_gpu) continue;
        backends_split.emplace_back(ggml_backend_dev_init(dev, nullptr));
        if (!backends_split.back()) fail(PSL_ERR_BACKEND, "cannot start the %s backend", ggml_backend_dev_name(dev));
        backends.push_back(backends_split.back().get());
    }
    backends.push_back(backend_cpu.get());   // the CPU last: the scheduler's fallback

    // (+ the nodes of an attention in FA_MAX_CHUNKS chunks: fa_rows_for)
    graph_size = std::max<size_t>(2048, 10 * (size_t) gguf_get_n_tensors(m->gguf)) +
                 4 * FA_MAX_CHUNKS * (size_t) m->hp.n_layer;
    graph_buf.resize(ggml_tensor_overhead() * graph_size + ggml_graph_overhead_custom(graph_size, false));
    sched.reset(ggml_backend_sched_new(backends.data(), nullptr, (int) backends.size(), graph_size, false, true));
    if (!sched) fail(PSL_ERR_BACKEND, "cannot create the backend scheduler");

    reserve();
}

// Reserves compute memory for the largest graph: a full batch attending to the whole cache. Done
// again when the tensors a graph keeps change (a draft head's layer inputs): ggml's allocator
// reuses its last plan for a graph of the same shape whatever its outputs.
void psl_context::reserve() {
    build_graph(params.n_batch, mem->kv().size(), Graph::Outputs::All, 0, false);
    if (!ggml_backend_sched_reserve(sched.get(), gf)) {
        fail(PSL_ERR_OUT_OF_MEMORY, "cannot reserve compute buffers for n_batch %d, n_ctx %d", params.n_batch,
             params.n_ctx);
    }
    graph_tokens = -1;   // reserved, not allocated: the first eval builds its own
}

psl_context::~psl_context() {
    draft_head.reset();
    mtp.reset();
    sched.reset();
    free_head();
    graph.reset();
    graph_ctx.reset();
    mem.reset();
    backend_gpu.reset();
    backends_split.clear();
    backend_cpu.reset();
    psl::release(model);
}

void psl_context::build_graph(int32_t n_tokens, int32_t n_kv, Graph::Outputs outputs, int32_t n_rows, bool embd,
                              int32_t fa_rows) {
    graph_tokens = -1;
    graph.reset();
    graph_ctx.reset();
    ggml_init_params p = {graph_buf.size(), graph_buf.data(), /*no_alloc =*/ true};
    graph_ctx.reset(ggml_init(p));
    if (!graph_ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the graph context");
    gf = ggml_new_graph_custom(graph_ctx.get(), graph_size, false);
    graph = std::make_unique<Graph>(graph_ctx.get(), gf, *model, mem->kv(), n_tokens, n_kv, outputs, n_rows, fa_rows);
    graph->embeddings = embd;
    graph->rows_input = rows_in_ != nullptr;
    graph->causal = !rows_non_causal_;
    graph->cpu_kernels = model->cpu_only();
    graph->rs = mem->rs();
    graph->mtp = mtp != nullptr;
    graph->capture = draft_head ? &draft_head->layers() : nullptr;
    graph->keep_final = draft_head && draft_head->wants_final();
    // the rows of the restricted head in use, if any
    graph->head = !head || head_packed ? head
                                       : ggml_view_2d(graph_ctx.get(), head, head->ne[0], (int64_t) head_ids.size(),
                                                      head->nb[1], 0);
    graph->result = model->arch->build(*graph);
    ggml_build_forward_expand(gf, graph->result);
    if (graph->cpu_kernels) psl::matmul_rows_adopt(graph_ctx.get(), gf, model->plain_twins);   // a verification's few rows
}

// ggml's CPU flash attention takes a tiled path (F32 queries, blocks of 64 cells) for 64 query
// rows and more, and goes row by row (F16 queries) below (or ours does, kernels/attention_rows.h,
// with the row path's arithmetic, in the same places): a sequence's logits would depend on
// what else shares its graph (seen: -np 8 servers answering a question two ways). When each
// sequence of the graph has fewer than 64 rows, so that alone it would go row by row, the
// attention takes its rows in chunks below 64: each row exactly as alone (a row reads its own
// sequence's cells, in order, whatever lies between). 0: one call (one sequence, a GPU, or a
// sequence of 64 rows or more, which alone is tiled too, in blocks that then depend on where
// its cells sit; or a graph of more rows than FA_MAX_CHUNKS chunks hold, as graph_size bounds
// its nodes). One row: ggml splits its cells over the threads from 512 cells on (the partial
// sums then depend on the thread count and on where the cells sit), and a sequence of up to 256
// tokens attends over 256 cells alone, row by row: where the cache's other sequences make the
// attention read 512 cells or more, a second row that sees nothing keeps the row-by-row path
// (Graph::FA_ROW_ALONE). Reads ub_seq_ and ub_pos_ of compute().
int32_t psl_context::fa_rows_for(int32_t n, int32_t n_kv) {
    constexpr int32_t tile_rows = 64;     // ggml-cpu's GGML_FA_TILE_Q
    constexpr int32_t split_cells = 512;  // ggml-cpu's flash attention splits one row's cells from here
    if (backend_gpu) return 0;
    if (n == 1) {
        const bool alone_whole = mem->kv().n_kv_for(ub_pos_[0] + 1) < split_cells;
        return n_kv >= split_cells && alone_whole ? Graph::FA_ROW_ALONE : 0;
    }
    if (n < tile_rows || n > FA_MAX_CHUNKS * (tile_rows - 1)) return 0;
    fa_seq_rows_.assign(mem->cells().n_seq(), 0);
    int32_t most = 0, n_seqs = 0;
    for (int32_t j = 0; j < n; ++j) {
        int32_t & r = fa_seq_rows_[ub_seq_[j]];
        n_seqs += r == 0;
        most = std::max(most, ++r);
    }
    if (n_seqs < 2 || most >= tile_rows) return 0;
    const int32_t n_chunks = (n + tile_rows - 2) / (tile_rows - 1);
    return (n + n_chunks - 1) / n_chunks;
}

// One graph: the tokens idx of b. Their cells are taken first (rewrite: a replay, whose tokens
// have theirs), so that the masks see the graph's own tokens; which rows give logits (or, with
// embd, final hidden states) follows the batch's flags. Rows go to out in the batch's order.
void psl_context::compute(const Batch & b, const std::vector<int32_t> & idx, bool rewrite, bool embd, float * out) {
    const int32_t n = (int32_t) idx.size();
    KvCells & cells = mem->cells();
    ub_tokens_.resize(n), ub_pos_.resize(n), ub_seq_.resize(n), ub_cell_.resize(n);
    ub_out_.clear(), ub_rows_.clear();
    for (int32_t j = 0; j < n; ++j) {
        const int32_t i = idx[j], s = b.seq(i);
        ub_tokens_[j] = b.tokens[i], ub_pos_[j] = b.pos[i], ub_seq_[j] = s;
        if (rewrite) {
            ub_cell_[j] = cells.cell_at(s, b.pos[i]);
        } else {
            ub_cell_[j] = mem->free_cell(b.seqs_of(i), b.n_seq_of(i), &moved_);
            if (!moved_.empty()) {               // compacted: the cells taken so far moved too
                for (int32_t k = 0; k < j; ++k) ub_cell_[k] = moved_[ub_cell_[k]];
                moved_.clear();
            }
            cells.append(ub_cell_[j], b.seqs_of(i), b.n_seq_of(i));
        }
        if (b.out_row[i] >= 0) ub_out_.push_back(j), ub_rows_.push_back(b.out_row[i]);
    }
    const int32_t n_out = (int32_t) ub_out_.size();
    const Graph::Outputs outputs = n_out == 0 ? Graph::Outputs::None : n_out == n ? Graph::Outputs::All
                                   : (n_out == 1 && ub_out_[0] == n - 1) ? Graph::Outputs::Last : Graph::Outputs::Rows;
    const int32_t n_rows = outputs == Graph::Outputs::Rows ? n_out : 0;
    const int32_t n_kv = mem->kv().n_kv_for(cells.used_end());
    const int32_t mode = (int32_t) outputs + (embd ? 16 : 0) + (rows_in_ ? 32 : 0) + (rows_non_causal_ ? 64 : 0);
    const int32_t fa_rows = fa_rows_for(n, n_kv);
    if (n != graph_tokens || n_kv != graph_kv || mode != graph_mode || n_rows != graph_rows || fa_rows != graph_fa) {
        build_graph(n, n_kv, outputs, n_rows, embd, fa_rows);
        ggml_backend_sched_reset(sched.get());
        if (!ggml_backend_sched_alloc_graph(sched.get(), gf)) {
            fail(PSL_ERR_BACKEND, "cannot allocate the compute graph (%d tokens)", n);
        }
        graph_tokens = n, graph_kv = n_kv, graph_mode = mode, graph_rows = n_rows, graph_fa = fa_rows;
    }
    UBatch ub{n, ub_tokens_.data(), ub_pos_.data(), ub_seq_.data(), ub_cell_.data(), ub_out_.data()};
    if (graph->inp_pos4) {   // M-RoPE: the rope positions the sequences' images changed
        ub_rope_.resize(4 * (size_t) n);
        for (int32_t j = 0; j < n; ++j) mem->spans().rope_pos(ub_seq_[j], ub_pos_[j], &ub_rope_[4 * (size_t) j]);
        ub.rope = ub_rope_.data();
    }
    inputs.fill(*graph, ub, cells);
    if (graph->inp_rows) {   // eval_rows: the batch's tokens are its rows, in order
        const size_t row = (size_t) model->hp.n_embd_inp();
        for (int32_t j = 0; j < n; ++j) {
            ggml_backend_tensor_set(graph->inp_rows, rows_in_ + (size_t) idx[j] * row, (size_t) j * row * sizeof(float),
                                    row * sizeof(float));
        }
    }
    // a hybrid's (and so MTP's) graphs hold one sequence at consecutive positions (split by_seq)
    const int32_t seq0 = ub_seq_[0], pos0 = ub_pos_[0];
    if (graph->mtp) mtp->before_compute(*graph, seq0, pos0);
    // In CPU memory the last node writes the rows straight into `out` rather than into the
    // compute buffer (saving a copy of up to n_vocab floats per row, and the memory): no node
    // reads it, so its data may point elsewhere during this compute. Only for rows that are
    // consecutive in out.
    ggml_tensor * res = graph->result;
    const bool use_head = head && !embd;
    const size_t width = embd ? (size_t) model->hp.n_embd : (size_t) model->hp.n_vocab;
    bool consecutive = true;
    for (int32_t r = 1; r < n_out; ++r) consecutive &= ub_rows_[r] == ub_rows_[0] + r;
    const bool direct = n_out > 0 && consecutive && !use_head && res->buffer && !res->view_src &&
                        ggml_backend_buffer_get_type(res->buffer) == ggml_backend_cpu_buffer_type();
    struct Redirect {
        ggml_tensor * t;
        void * own;
        ~Redirect() { if (t) t->data = own; }
    } redirect{direct ? res : nullptr, res->data};
    if (direct) res->data = out + (size_t) ub_rows_[0] * width;
    if (mem->rs()) mem->begin_batch(seq0, pos0, n);
    // fewer threads while other processes keep the cores busy (thread_budget.h)
    perf.n_threads_last = psl::threads_for_now(params.n_threads);
    ggml_backend_cpu_set_n_threads(backend_cpu.get(), perf.n_threads_last);
    const ggml_status st = psl::compute_graph(sched.get(), gf);
    if (st == GGML_STATUS_ABORTED) {
        interrupt = false;   // consumed (a SIGINT leaves it as it was)
        fail(PSL_ERR_INTERRUPTED, "evaluation interrupted");
    }
    if (st != GGML_STATUS_SUCCESS) fail(PSL_ERR_BACKEND, "graph computation failed (ggml status %d)", (int) st);
    if (n_out > 0 && !direct) write_rows(ub_rows_, consecutive, use_head, width, out);
    if (graph->mtp) mtp->after_compute(*graph, seq0, pos0);
    // a draft head takes sequence 0 only (decode refuses others), whose cells are its positions;
    // at an image's rows it sees the family's image token (EAGLE-3 pairs tokens with features)
    if (draft_head) {
        const int32_t * toks = ub_tokens_.data();
        if (rows_in_) head_tokens_.assign((size_t) n, rows_draft_token_), toks = head_tokens_.data();
        draft_head->after_compute(*graph, toks, pos0, interrupt);
    }
    if (mem->rs()) {
        mem->end_batch(seq0, ub_tokens_.data(), n);
    } else {
        for (int32_t j = 0; j < n; ++j) {
            const int32_t i = idx[j];
            for (int32_t k = 0; k < b.n_seq_of(i); ++k) mem->add_history(b.seqs_of(i)[k], b.tokens[i]);
        }
    }
}

// The graph's rows (width floats each) into out's rows `rows` (a restricted head: spread over
// the vocabulary, -inf elsewhere).
void psl_context::write_rows(const std::vector<int32_t> & rows, bool consecutive, bool use_head, size_t width,
                             float * out) {
    ggml_tensor * res = graph->result;
    if (!use_head) {
        if (consecutive) {
            ggml_backend_tensor_get(res, out + (size_t) rows[0] * width, 0, ggml_nbytes(res));
            return;
        }
        for (size_t r = 0; r < rows.size(); ++r) {
            ggml_backend_tensor_get(res, out + (size_t) rows[r] * width, r * res->nb[1], width * sizeof(float));
        }
        return;
    }
    const size_t n_sub = head_ids.size(), stride = (size_t) res->ne[0];   // a packed head's spare rows too
    head_logits.resize(ggml_nelements(res));
    ggml_backend_tensor_get(res, head_logits.data(), 0, ggml_nbytes(res));
    for (size_t r = 0; r < rows.size(); ++r) {
        float * dst = out + (size_t) rows[r] * width;
        const float * src = head_logits.data() + r * stride;
        std::fill(dst, dst + width, -INFINITY);
        for (size_t j = 0; j < n_sub; ++j) dst[head_ids[j]] = src[j];
    }
}

// What the memory asks for before a sequence is used: its kept tokens again, when its memory is
// stale (memory.h).
void psl_context::replay(int32_t seq) {
    mem->replay(seq, [this, seq](const int32_t * toks, int32_t n) {
        const Batch b = Batch::replay(seq, toks, n);
        for (const auto & idx : b.split(params.n_batch, true)) compute(b, idx, true, false, nullptr);
    });
}

// Room for the batch's tokens: the MTP scratch cells of its sequences go first, all of them if
// that is not enough.
void psl_context::make_room(const Batch & b) {
    KvCells & cells = mem->cells();
    for (int32_t s : b.seq_ids()) cells.drop_scratch(s);
    if (cells.n_free() < b.n) cells.drop_all_scratch();
    if (cells.n_free() < b.n) {
        fail(PSL_ERR_CONTEXT_FULL, "context full: the KV cache has %d free cells of %d, the batch needs %d",
             cells.n_free(), cells.size(), b.n);
    }
}

// A draft head (head.h) follows one sequence, 0, whose cells are its positions: a batch that
// names another is refused rather than computed against the wrong features.
void psl_context::check_head_seqs(const Batch & b) const {
    if (!draft_head) return;
    for (int32_t s : b.seq_ids()) {
        if (s != 0) {
            fail(PSL_ERR_UNSUPPORTED, "a context with a draft head (%s) holds one sequence: sequence %d is not supported",
                 draft_head->head().arch_name.c_str(), s);
        }
    }
}

// The batch's graphs, in order; on failure every sequence it touched is as it was.
void psl_context::run(const Batch & b, bool embd, float * out) {
    check_head_seqs(b);
    SigintScope sigint(catch_sigint);
    sigint_mark = g_sigint_count.load();
    const std::vector<int32_t> seqs = b.seq_ids();
    for (int32_t s : seqs) replay(s);
    make_room(b);
    std::vector<int32_t> n_past0;
    for (int32_t s : seqs) n_past0.push_back(mem->n_past(s));
    try {
        for (const auto & idx : b.split(params.n_batch, one_seq_per_graph())) {
            // an interrupt asked for before this eval or between its graphs (a GPU backend
            // polls no abort callback) stops it here
            if (interrupt.exchange(false)) fail(PSL_ERR_INTERRUPTED, "evaluation interrupted");
            compute(b, idx, false, embd, out);
        }
    } catch (...) {
        for (size_t k = 0; k < seqs.size(); ++k) mem->truncate(seqs[k], n_past0[k]);   // as it found them
        throw;
    }
}

// A hybrid's recurrent state and an MTP block's hidden rows follow one sequence per graph, and
// one sequence per token.
bool psl_context::one_seq_per_graph() const { return mem->rs() != nullptr || mtp != nullptr; }

void psl_context::decode(const psl_batch & batch, float * out, int64_t out_cap) {
    const Batch b(batch, *mem, model->hp.n_vocab, params.n_ctx, one_seq_per_graph());
    check_logits_out(b, out, out_cap);
    run(b, false, out);
}

// NULL is a buffer for no rows (a prompt's prefill)
void psl_context::check_logits_out(const psl::Batch & b, const float * out, int64_t out_cap) const {
    const int32_t n_vocab = model->hp.n_vocab;
    if (!out && b.n_out > 0) fail(PSL_ERR_INVALID_ARGUMENT, "logits buffer is NULL, %d rows requested", b.n_out);
    if (out && out_cap < (int64_t) b.n_out * n_vocab) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "logits buffer holds %lld floats, %lld needed", (long long) out_cap,
             (long long) b.n_out * n_vocab);
    }
}

// The flags of n rows for a logits mode: none, the last row's, or every row's.
std::vector<int8_t> psl_context::logits_flags(int32_t n, int32_t mode) {
    if (mode != PSL_LOGITS_NONE && mode != PSL_LOGITS_LAST && mode != PSL_LOGITS_ALL) {
        fail(PSL_ERR_INVALID_ARGUMENT, "logits_mode must be 0 (none), 1 (last) or 2 (all), got %d", mode);
    }
    std::vector<int8_t> flags(n > 0 ? (size_t) n : 0, mode == PSL_LOGITS_ALL ? 1 : 0);
    if (mode == PSL_LOGITS_LAST && n > 0) flags[(size_t) n - 1] = 1;
    return flags;
}

void psl_context::eval(const int32_t * tokens, int32_t n, int32_t mode, float * out, int64_t out_cap) {
    const std::vector<int8_t> flags = logits_flags(n, mode);
    const psl_batch b{n, tokens, nullptr, nullptr, nullptr, flags.data()};
    decode(b, out, out_cap);
}

void psl_context::embed(const int32_t * tokens, int32_t n, float * out, int64_t out_cap) {
    const int32_t n_embd = model->hp.n_embd;
    std::vector<int8_t> flags(n > 0 ? (size_t) n : 0, 1);
    const psl_batch batch{n, tokens, nullptr, nullptr, nullptr, flags.data()};
    const Batch b(batch, *mem, model->hp.n_vocab, params.n_ctx, one_seq_per_graph());
    if (!out && n > 0) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
    if (out_cap < (int64_t) n * n_embd) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "embeddings buffer holds %lld floats, %lld needed", (long long) out_cap,
             (long long) n * n_embd);
    }
    run(b, true, out);
}

void psl_context::check_seq(int32_t seq) const {
    if (seq < 0 || seq >= mem->n_seq()) {
        fail(PSL_ERR_OUT_OF_RANGE, "sequence id %d is outside [0, %d) (the context's n_seq_max)", seq, mem->n_seq());
    }
}

void psl_context::truncate(int32_t seq, int32_t n_keep) {
    check_seq(seq);
    mem->truncate(seq, n_keep);
    if (draft_head && seq == 0) draft_head->truncate(n_keep);
}

void psl_context::copy(int32_t src, int32_t dst, int32_t n) {
    check_seq(src);
    check_seq(dst);
    if (draft_head && dst != 0) {
        fail(PSL_ERR_UNSUPPORTED, "a context with a draft head (%s) holds one sequence: sequence %d is not supported",
             draft_head->head().arch_name.c_str(), dst);
    }
    mem->copy(src, dst, n);
    if (mtp) mtp->copy(src, dst);
    if (draft_head) draft_head->truncate(mem->n_past(0));
}

// A sequence's state or a hybrid's checkpoint (memory/seq_state.cpp); with an MTP block, the
// hidden rows its drafts read follow in a trailer (positions n - k .. n - 1, then MtpTrailer):
// the newest 17 for a state (as far as the recurrent ring rolls back), the last one for a
// checkpoint. Not with a draft head yet (its own state would not follow).
namespace {
struct MtpTrailer {
    uint32_t magic, n_rows, n_embd, pad;
};
constexpr uint32_t MTP_MAGIC = 0x504d544d;   // "MTMP"
constexpr int32_t MTP_STATE_ROWS = 17;
}  // namespace

void psl_context::check_state(int32_t seq, const char * what) const {
    check_seq(seq);
    if (draft_head) fail(PSL_ERR_UNSUPPORTED, "%s with a draft head attached", what);
}

size_t psl_context::mtp_trailer_size(int32_t seq, int32_t most) const {
    if (!mtp) return 0;
    const int32_t k = mtp->hidden_rows(seq, mem->n_past(seq), most);
    return sizeof(MtpTrailer) + sizeof(float) * (size_t) k * (size_t) mtp->n_embd();
}

void psl_context::mtp_trailer_get(int32_t seq, int32_t most, uint8_t * dst) const {
    if (!mtp) return;
    const int32_t n = mem->n_past(seq), k = mtp->hidden_rows(seq, n, most);
    mtp->hidden_get(seq, n, k, (float *) dst);
    const MtpTrailer t{MTP_MAGIC, (uint32_t) k, (uint32_t) mtp->n_embd(), 0};
    std::memcpy(dst + sizeof(float) * (size_t) k * (size_t) mtp->n_embd(), &t, sizeof t);
}

// The bytes before the trailer (all of them without an MTP block); the trailer checked.
size_t psl_context::mtp_trailer_check(const uint8_t * src, size_t size, MtpRows & rows) const {
    if (!mtp) return size;
    MtpTrailer t{};
    if (size < sizeof t) fail(PSL_ERR_INVALID_ARGUMENT, "a state of %zu bytes is truncated", size);
    std::memcpy(&t, src + size - sizeof t, sizeof t);
    const size_t bytes = sizeof(float) * (size_t) t.n_rows * (size_t) t.n_embd;
    if (t.magic != MTP_MAGIC || t.n_embd != (uint32_t) mtp->n_embd() || size < sizeof t + bytes) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the state carries no MTP block's rows of this model (one saved without MTP "
             "drafting, or another model's)");
    }
    rows.k = (int32_t) t.n_rows;
    rows.data = src + size - sizeof t - bytes;
    return size - sizeof t - bytes;
}

size_t psl_context::seq_state_size(int32_t seq) const {
    check_state(seq, "a sequence's state");
    return mem->state_size(seq) + mtp_trailer_size(seq, MTP_STATE_ROWS);
}

void psl_context::seq_state_get(int32_t seq, uint8_t * dst, size_t cap) const {
    const size_t need = seq_state_size(seq);
    if (cap < need) fail(PSL_ERR_BUFFER_TOO_SMALL, "the state of sequence %d takes %zu bytes, the buffer %zu", seq, need, cap);
    const size_t head = mem->state_size(seq);
    mem->state_get(seq, dst, head);
    mtp_trailer_get(seq, MTP_STATE_ROWS, dst + head);
}

void psl_context::seq_state_set(int32_t seq, const uint8_t * src, size_t size) {
    check_state(seq, "a sequence's state");
    MtpRows rows;
    mem->state_set(seq, src, mtp_trailer_check(src, size, rows));
    if (mtp) mtp->hidden_set(seq, mem->n_past(seq), std::min(rows.k, mem->n_past(seq)), (const float *) rows.data);
}

size_t psl_context::seq_checkpoint_size(int32_t seq) const {
    check_state(seq, "a checkpoint");
    return mem->checkpoint_size(seq) + mtp_trailer_size(seq, 1);
}

void psl_context::seq_checkpoint_get(int32_t seq, uint8_t * dst, size_t cap) const {
    const size_t need = seq_checkpoint_size(seq);
    if (cap < need) fail(PSL_ERR_BUFFER_TOO_SMALL, "the checkpoint of sequence %d takes %zu bytes, the buffer %zu", seq, need, cap);
    const size_t head = mem->checkpoint_size(seq);
    mem->checkpoint_get(seq, dst, head);
    mtp_trailer_get(seq, 1, dst + head);
}

void psl_context::seq_checkpoint_set(int32_t seq, const uint8_t * src, size_t size) {
    check_state(seq, "a checkpoint");
    MtpRows rows;
    mem->checkpoint_set(seq, src, mtp_trailer_check(src, size, rows));
    if (mtp) mtp->hidden_set(seq, mem->n_past(seq), std::min(rows.k, mem->n_past(seq)), (const float *) rows.data);
}

void psl_context::clear() {
    mem->clear();
    if (mtp) mtp->clear();
    if (draft_head) draft_head->clear();
}

std::vector<ggml_backend_t> psl_context::backends() const {
    std::vector<ggml_backend_t> b;
    if (backend_gpu) b.push_back(backend_gpu.get());
    for (const auto & s : backends_split) b.push_back(s.get());
    b.push_back(backend_cpu.get());
    return b;
}

void psl_context::attach_head(psl_model * h) {
    std::unique_ptr<HeadState> state;
    if (h) {
        state = HeadState::make(*h, *model, mem->kv(), backends(), params.n_ctx, (ggml_type) params.type_k,
                                (ggml_type) params.type_v);
    }
    draft_head = std::move(state);
    reserve();   // the target's graph keeps the head's layer inputs now
    clear();     // what is cached has no features for the head: evaluated again
}

// The checks of a head's draft call, in order; n: the rows it writes (0: a block asked for none).
void psl_context::check_head_call(int32_t token, int32_t n, float * out, int64_t out_cap) const {
    if (!draft_head) fail(PSL_ERR_INVALID_ARGUMENT, "no draft head is attached to this context (psl_context_attach_head)");
    if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "logits buffer is NULL");
    if (n < 1) fail(PSL_ERR_INVALID_ARGUMENT, "a block drafts at least one token, asked %d", n);
    if (out_cap < (int64_t) n * model->hp.n_vocab) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "logits buffer holds %lld floats, %lld needed", (long long) out_cap,
             (long long) n * model->hp.n_vocab);
    }
    if (token < 0 || token >= model->hp.n_vocab) {
        fail(PSL_ERR_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", token, model->hp.n_vocab);
    }
}

void psl_context::head_draft(int32_t token, int32_t step, float * out, int64_t out_cap) {
    check_head_call(token, 1, out, out_cap);
    replay(0);
    draft_head->draft(token, step, mem->n_past(0), interrupt, out);
}

void psl_context::head_block(int32_t token, int32_t n, float * out, int64_t out_cap) {
    check_head_call(token, n, out, out_cap);
    replay(0);
    draft_head->draft_block(token, n, mem->n_past(0), interrupt, out);
}

void psl_context::enable_mtp() {
    if (mtp) return;
    if (model->mtp_layer < 0 || !model->arch->build_mtp) fail(PSL_ERR_UNSUPPORTED, "the model has no MTP (nextn) layers to draft with");
    mem->kv().add_mtp_layer(*model);
    std::vector<ggml_backend_t> backends;   // the MTP graph runs on the GPU (if any) and the CPU
    if (backend_gpu) backends.push_back(backend_gpu.get());
    backends.push_back(backend_cpu.get());
    mtp = std::make_unique<MtpState>(*model, mem->kv(), mem->spans(), backends, params.n_ctx,
                                     mem->rs() ? mem->rs()->n_snap() + 1 : 64);
    graph_tokens = -1;   // the target's graph now also fills the MTP cache
    // tokens already in the cache have no MTP entries: rebuild them by a replay
    if (mem->cells().n_used() > 0) mem->replay_all();
}

void psl_context::mtp_draft(int32_t seq, int32_t token, int32_t step, float * out, int64_t out_cap) {
    check_seq(seq);
    if (!mtp) fail(PSL_ERR_INVALID_ARGUMENT, "MTP drafting is not enabled on this context (psl_context_enable_mtp)");
    if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "logits buffer is NULL");
    if (out_cap < model->hp.n_vocab) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "logits buffer holds %lld floats, %d needed", (long long) out_cap, model->hp.n_vocab);
    }
    if (token < 0 || token >= model->hp.n_vocab) {
        fail(PSL_ERR_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", token, model->hp.n_vocab);
    }
    replay(seq);   // a pending replay also rebuilds the MTP cache
    mtp->draft(seq, token, step, interrupt, out);
}

void psl_context::mtp_draft_nodes(int32_t seq, int32_t n, const int32_t * tokens, const int32_t * parents, float * out,
                                  int64_t out_cap) {
    check_seq(seq);
    if (!mtp) fail(PSL_ERR_INVALID_ARGUMENT, "MTP drafting is not enabled on this context (psl_context_enable_mtp)");
    if (!out || !tokens || !parents) fail(PSL_ERR_INVALID_ARGUMENT, "tokens, parents or logits is NULL");
    if (n < 1 || n > MtpState::max_batch) {
        fail(PSL_ERR_INVALID_ARGUMENT, "MTP draft nodes: n is %d, must be in [1, %d]", n, MtpState::max_batch);
    }
    if (out_cap < (int64_t) n * model->hp.n_vocab) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "logits buffer holds %lld floats, %lld needed", (long long) out_cap,
             (long long) n * model->hp.n_vocab);
    }
    for (int32_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= model->hp.n_vocab) {
            fail(PSL_ERR_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", tokens[i], model->hp.n_vocab);
        }
    }
    replay(seq);   // a replay changes the sequence: the draft it held is gone (InvalidArgument)
    mtp->draft_nodes(seq, n, tokens, parents, interrupt, out);
}

void psl_context::set_threads(int32_t n) {
    check_threads(n);
    params.n_threads = n > 0 ? n : default_threads();
    ggml_backend_cpu_set_n_threads(backend_cpu.get(), params.n_threads);
}
