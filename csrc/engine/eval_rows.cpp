// psl_context::eval_rows: an image's rows in place of token embeddings (psl_context_seq_eval_rows).
#include "engine/context.h"

#include "error.h"


using psl::fail;

// Where the rows go (pyllamaspec.h's psl_rows_layout): the grid is checked whatever the model;
// only a model with M-RoPE places a gridded image 2-D, as llama.cpp's mtmd decides by the model.
psl::RowSpan psl_context::rows_span(int32_t seq, int32_t n, const psl_rows_layout & layout) const {
    const int32_t gx = layout.grid_x, gy = layout.grid_y;
    if (gx < 0 || gy < 0 || (gx == 0) != (gy == 0)) {
        fail(PSL_ERR_INVALID_ARGUMENT, "an image's grid is %d x %d: both sides positive, or 0 x 0 (one position a row)",
             gx, gy);
    }
    if (gx > 0 && (int64_t) gx * gy != n) {
        fail(PSL_ERR_INVALID_ARGUMENT, "an image's grid of %d x %d holds %lld rows; %d rows given", gx, gy,
             (long long) gx * gy, n);
    }
    psl::RowSpan s;
    s.first = mem->n_past(seq), s.n = n;
    if (model->arch->mrope_rows) s.nx = gx, s.ny = gy;
    return s;
}

// Rows are n_embd wide, or with deepstack (Qwen3-VL) n_embd * (1 + n_deepstack): a projector's
// deepstack count must be the text model's, as llama.cpp's mtmd checks the widths.
void psl_context::check_rows_width(int32_t width) const {
    const psl::HParams & hp = model->hp;
    if (width == hp.n_embd_inp()) return;
    if (width > 0 && width % hp.n_embd == 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "rows of width %d given (n_embd %d x %d: %d deepstack slices); the model "
             "takes %d (%d deepstack slices): a projector made for another model?", width, hp.n_embd,
             width / hp.n_embd, width / hp.n_embd - 1, hp.n_embd_inp(), hp.n_deepstack);
    }
    fail(PSL_ERR_INVALID_ARGUMENT, "rows of width %d given; the model's embeddings have %d%s (a projector made "
         "for another model?)", width, hp.n_embd_inp(), hp.n_deepstack ? " (with its deepstack slices)" : "");
}

// Rows in place of token embeddings (an image's, from a projector: vision/projector.h), as llama.cpp
// decodes an mtmd image chunk: each row takes a position and a cell as a token would, holding
// ids[i] in the sequence's history (the image's own ids, any int32: what a state file keeps, so a
// restored sequence is told from one that holds other rows, or a text, there); a non-causal chunk
// is one graph in which every row sees all the others. The image's span (memory/row_spans.h) is
// the sequence's before its graphs run, so that their M-RoPE positions are the image's.
void psl_context::eval_rows(int32_t seq, const float * rows, int32_t n, int32_t width, const int32_t * ids,
                            const psl_rows_layout & layout, int32_t mode, float * out, int64_t out_cap) {
    check_seq(seq);
    if (!rows || n <= 0) fail(PSL_ERR_INVALID_ARGUMENT, "rows is NULL or n (%d) is not positive", n);
    if (!ids) fail(PSL_ERR_INVALID_ARGUMENT, "ids is NULL");
    check_rows_width(width);
    // with MTP the target's graph fills the block's cache at the rows too (the row is its
    // embedding there, and its M-RoPE positions the image's), so drafting goes on after them; a
    // draft head reads the target's features at the rows as at tokens
    if (!model->arch->takes_rows) {
        fail(PSL_ERR_UNSUPPORTED, "embedding rows (an image) are not supported yet with the architecture %s",
             model->arch_name.c_str());
    }
    if (draft_head && (layout.draft_token < 0 || layout.draft_token >= model->hp.n_vocab)) {
        fail(PSL_ERR_INVALID_ARGUMENT, "draft_token %d (what the draft head sees at the rows) is not a token of the "
             "vocabulary (0..%d)", layout.draft_token, model->hp.n_vocab - 1);
    }
    if (layout.non_causal && n > params.n_batch) {
        fail(PSL_ERR_INVALID_ARGUMENT, "an image of %d rows attends within itself in one batch: n_batch (%d) must "
             "hold it", n, params.n_batch);
    }
    const psl::RowSpan span = rows_span(seq, n, layout);
    // the batch is checked with token 0 (no row reads a token's embedding); its history is ids
    std::vector<int32_t> tokens((size_t) n, 0), seqs((size_t) n, seq);
    const std::vector<int8_t> flags = logits_flags(n, mode);
    const psl_batch batch{n, tokens.data(), nullptr, nullptr, seqs.data(), flags.data()};
    psl::Batch b(batch, *mem, model->hp.n_vocab, params.n_ctx, one_seq_per_graph());
    b.tokens.assign(ids, ids + n);
    check_logits_out(b, out, out_cap);
    struct Scope {   // the next token graph is built as before, whatever happens here
        psl_context & c;
        int32_t seq, first;
        bool done = false;
        ~Scope() {
            c.rows_in_ = nullptr, c.rows_non_causal_ = false, c.rows_draft_token_ = 0, c.graph_tokens = -1;
            if (!done) c.mem->spans().truncate(seq, first);   // failed: the span goes as the rows did
        }
    } scope{*this, seq, span.first};
    rows_in_ = rows, rows_non_causal_ = layout.non_causal, rows_draft_token_ = layout.draft_token, graph_tokens = -1;
    mem->spans().add(seq, span);
    run(b, false, out);
    scope.done = true;
}
