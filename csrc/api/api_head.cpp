// The C API of draft heads (engine/head.h).
#include "engine/context.h"
#include "error.h"
#include "gguf/gguf_file.h"
#include "model.h"
#include "pyllamaspec.h"

#include <algorithm>
#include <cstring>

using namespace psl;

psl_status psl_model_head_info(const psl_model * model, psl_head_info * out) {
    return guard([&] {
        if (!model || !out) fail(PSL_ERR_INVALID_ARGUMENT, "model or out is NULL");
        std::memset(out, 0, sizeof(*out));
        out->mask_token = -1;
        if (!model->arch || !model->arch->is_head()) return;
        const HParams::Head & h = model->hp.head;
        out->kind = model->arch->reads_target_kv ? PSL_HEAD_GEMMA4_ASSISTANT
                    : model->arch_name == "eagle3"   ? PSL_HEAD_EAGLE3
                                                     : PSL_HEAD_DFLASH;
        out->n_target_layers = (int32_t) std::min<size_t>(h.target_layers.size(), 64);
        std::copy(h.target_layers.begin(), h.target_layers.begin() + out->n_target_layers, out->target_layers);
        out->n_embd_target = h.n_embd_target;
        out->n_draft_vocab = h.d2t.empty() ? model->hp.n_vocab : (int32_t) h.d2t.size();
        out->block_size = h.block_size;
        out->mask_token = h.mask_token;
    });
}

psl_status psl_file_arch(const char * path, char * arch, size_t cap) {
    return guard([&] {
        if (!path || !arch || cap == 0) fail(PSL_ERR_INVALID_ARGUMENT, "path or arch is NULL");
        GgufFile f(path);
        const std::string a = f.get_str("general.architecture", "");
        const size_t n = std::min(cap - 1, a.size());
        std::memcpy(arch, a.data(), n);
        arch[n] = '\0';
    });
}

psl_status psl_context_attach_head(psl_context * ctx, psl_model * head) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->attach_head(head);
    });
}

psl_status psl_context_head_draft(psl_context * ctx, int32_t token, int32_t step, float * logits, int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->head_draft(token, step, logits, out_cap);
    });
}

psl_status psl_context_head_block(psl_context * ctx, int32_t token, int32_t n, float * logits, int64_t out_cap) {
    return guard([&] {
        if (!ctx) fail(PSL_ERR_INVALID_ARGUMENT, "ctx is NULL");
        ctx->head_block(token, n, logits, out_cap);
    });
}
