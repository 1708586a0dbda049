// The C API of sequences (batch.h, kv_cells.h): decode a batch of several sequences, and
// truncate, copy and count per sequence.
#include "error.h"
#include "engine/context.h"
#include "engine/mtp.h"
#include "pyllamaspec.h"

#include <chrono>

using namespace psl;

extern "C" {

psl_status psl_context_decode(psl_context * ctx, const psl_batch * batch, float * out, int64_t out_cap) {
    return guard([&] {
        if (!ctx || !batch) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or batch is NULL");
        const auto t0 = std::chrono::steady_clock::now();
        ctx->decode(*batch, out, out_cap);
        ctx->perf.t_eval_us += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        ctx->perf.n_evals += 1;
        ctx->perf.n_tokens += batch->n_tokens;
    });
}

int32_t psl_context_seq_n_past(const psl_context * ctx, int32_t seq) {
    if (!ctx || seq < 0 || seq >= ctx->mem->n_seq()) return 0;
    return ctx->mem->n_past(seq);
}

psl_status psl_context_seq_truncate(psl_context * ctx, int32_t seq, int32_t n_keep) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->truncate(seq, n_keep);
    });
}

psl_status psl_context_seq_copy(psl_context * ctx, int32_t src, int32_t dst, int32_t n) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->copy(src, dst, n);
    });
}

psl_status psl_context_seq_state_size(const psl_context * ctx, int32_t seq, int64_t * size) {
    return guard([&] {
        if (!ctx || !size) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or size is NULL");
        *size = (int64_t) ctx->seq_state_size(seq);
    });
}

psl_status psl_context_seq_state_get(const psl_context * ctx, int32_t seq, uint8_t * dst, int64_t cap) {
    return guard([&] {
        if (!ctx || !dst || cap < 0) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or dst is NULL, or cap < 0");
        ctx->seq_state_get(seq, dst, (size_t) cap);
    });
}

psl_status psl_context_seq_state_set(psl_context * ctx, int32_t seq, const uint8_t * src, int64_t size) {
    return guard([&] {
        if (!ctx || !src || size < 0) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or src is NULL, or size < 0");
        ctx->seq_state_set(seq, src, (size_t) size);
    });
}

psl_status psl_context_seq_checkpoint_size(const psl_context * ctx, int32_t seq, int64_t * size) {
    return guard([&] {
        if (!ctx || !size) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or size is NULL");
        *size = (int64_t) ctx->seq_checkpoint_size(seq);
    });
}

psl_status psl_context_seq_checkpoint_get(const psl_context * ctx, int32_t seq, uint8_t * dst, int64_t cap) {
    return guard([&] {
        if (!ctx || !dst || cap < 0) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or dst is NULL, or cap < 0");
        ctx->seq_checkpoint_get(seq, dst, (size_t) cap);
    });
}

psl_status psl_context_seq_checkpoint_set(psl_context * ctx, int32_t seq, const uint8_t * src, int64_t size) {
    return guard([&] {
        if (!ctx || !src || size < 0) fail(PSL_ERR_INVALID_ARGUMENT, "ctx or src is NULL, or size < 0");
        ctx->seq_checkpoint_set(seq, src, (size_t) size);
    });
}

bool psl_context_seq_stale(const psl_context * ctx, int32_t seq) {
    return ctx && seq >= 0 && seq < ctx->mem->n_seq() && ctx->mem->stale(seq);
}

int32_t psl_context_n_seq_max(const psl_context * ctx) { return ctx ? ctx->mem->n_seq() : 0; }

int32_t psl_context_n_cells_used(const psl_context * ctx) { return ctx ? ctx->mem->cells().n_used() : 0; }

psl_status psl_context_seq_mtp_draft(psl_context * ctx, int32_t seq, int32_t token, int32_t step, float * logits,
                                     int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->mtp_draft(seq, token, step, logits, out_cap);
    });
}

psl_status psl_context_seq_mtp_draft_nodes(psl_context * ctx, int32_t seq, int32_t n, const int32_t * tokens,
                                           const int32_t * parents, float * logits, int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->mtp_draft_nodes(seq, n, tokens, parents, logits, out_cap);
    });
}

}  // extern "C"
