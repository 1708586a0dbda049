// The C API of vision projectors (vision/projector.h) and of evaluating their rows.
#include "engine/context.h"
#include "error.h"
#include "pyllamaspec.h"
#include "vision/projector.h"

#include <algorithm>
#include <cstring>

using namespace psl;

psl_status psl_projector_load(const char * path, int32_t n_threads, psl_projector ** out) {
    if (out) *out = nullptr;
    return guard([&] {
        if (!path || !out) fail(PSL_ERR_INVALID_ARGUMENT, "path or out is NULL");
        if (n_threads < 0 || n_threads > 512) fail(PSL_ERR_INVALID_ARGUMENT, "n_threads must be in [0, 512]");
        *out = new psl_projector(path, n_threads);
    });
}

void psl_projector_free(psl_projector * proj) { delete proj; }

psl_status psl_projector_get_info(const psl_projector * proj, psl_projector_info * out) {
    return guard([&] {
        if (!proj || !out) fail(PSL_ERR_INVALID_ARGUMENT, "proj or out is NULL");
        std::memset(out, 0, sizeof(*out));
        const size_t n = std::min(sizeof(out->type) - 1, std::strlen(proj->ops->name));
        std::memcpy(out->type, proj->ops->name, n);
        const VitHParams & hp = proj->hp;
        out->image_size = hp.image_size;
        out->patch_size = hp.patch_size;
        out->n_merge = hp.n_merge;
        out->n_embd = hp.row_width();
        out->n_deepstack = hp.n_deepstack;
        out->n_tokens = proj->n_tokens();
        std::copy(hp.mean, hp.mean + 3, out->image_mean);
        std::copy(hp.std, hp.std + 3, out->image_std);
        out->non_causal = proj->ops->non_causal && !hp.causal;
        out->mrope = proj->ops->mrope;
        out->row_breaks = proj->ops->row_breaks;
    });
}

psl_status psl_projector_image_grid(const psl_projector * proj, int64_t width, int64_t height, int32_t * nx,
                                    int32_t * ny) {
    return guard([&] {
        if (!proj || !nx || !ny) fail(PSL_ERR_INVALID_ARGUMENT, "proj, nx or ny is NULL");
        proj->ops->grid(proj->hp, width, height, *nx, *ny);
    });
}

psl_status psl_projector_encode(psl_projector * proj, const float * pixels, int32_t width, int32_t height,
                                float * out, int64_t out_cap) {
    return guard([&] {
        if (!proj) fail(PSL_ERR_INVALID_ARGUMENT, "proj is NULL");
        proj->encode(pixels, width, height, out, out_cap);
    });
}

psl_status psl_context_seq_eval_rows(psl_context * ctx, int32_t seq, const float * rows, int32_t n, int32_t width,
                                     const int32_t * ids, const psl_rows_layout * layout, int32_t logits_mode,
                                     float * out, int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        const psl_rows_layout plain{false, 0, 0};
        ctx->eval_rows(seq, rows, n, width, ids, layout ? *layout : plain, logits_mode, out, out_cap);
    });
}
