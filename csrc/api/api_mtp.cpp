// The C API of MTP drafting (mtp.h).
#include "error.h"
#include "engine/context.h"
#include "model.h"
#include "pyllamaspec.h"

using namespace psl;

int32_t psl_model_n_mtp_layers(const psl_model * model) { return model && model->mtp_layer >= 0 ? 1 : 0; }

psl_status psl_context_enable_mtp(psl_context * ctx) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->enable_mtp();
    });
}

psl_status psl_context_mtp_draft(psl_context * ctx, int32_t token, int32_t step, float * logits, int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->mtp_draft(0, token, step, logits, out_cap);
    });
}
