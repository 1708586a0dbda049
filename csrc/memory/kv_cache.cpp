#include "memory/kv_cache.h"

#include "error.h"
#include "model.h"

#include "ggml-alloc.h"

#include <algorithm>

namespace psl {

KvCache::KvCache(const psl_model & m, int32_t n_cells, int32_t n_seq, ggml_type type_k, ggml_type type_v)
    : n_cells_(GGML_PAD(n_cells, pad())), cells_(n_cells, n_seq) {   // the padding is never handed out
    const HParams & hp = m.hp;
    if ((hp.n_embd_k_gqa() % ggml_blck_size(type_k)) != 0 || (hp.n_embd_v_gqa() % ggml_blck_size(type_v)) != 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "KV cache types %s/%s do not fit a row of %d/%d elements",
             ggml_type_name(type_k), ggml_type_name(type_v), hp.n_embd_k_gqa(), hp.n_embd_v_gqa());
    }
    // Each layer's cache sits on the device that runs the layer.
    auto ctx_for = [&](ggml_backend_dev_t dev) -> ggml_context * {
        for (auto & [d, c] : ctxs_) {
            if (d == dev) return c.get();
        }
        ggml_init_params p = {ggml_tensor_overhead() * (2 * (size_t) hp.n_layer + 4), nullptr, true};
        ggml_context_ptr ctx(ggml_init(p));
        if (!ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the KV cache context");
        ctxs_.emplace_back(dev, std::move(ctx));
        return ctxs_.back().second.get();
    };
    // an MTP block's attention (mtp.h) caches at index n_layer, like one more layer
    const int n_cached = m.mtp_layer >= 0 ? m.mtp_layer + 1 : hp.n_layer;
    for (int il = 0; il < n_cached; ++il) {
        if (hp.is_recurrent(il)) {   // a hybrid's linear-attention layer keeps a recurrent state instead
            k_.push_back(nullptr);
            v_.push_back(nullptr);
            continue;
        }
        ggml_context * ctx = ctx_for(m.layer_device(il));
        k_.push_back(ggml_new_tensor_2d(ctx, type_k, hp.n_embd_k_gqa(), n_cells_));
        v_.push_back(ggml_new_tensor_2d(ctx, type_v, hp.n_embd_v_gqa(), n_cells_));
    }
    for (auto & [dev, ctx] : ctxs_) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);
        if (!buf) {
            fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the KV cache (%d cells) on %s",
                 ggml_backend_alloc_ctx_tensors_from_buft_size(ctx.get(), buft) / 1048576.0, n_cells_,
                 ggml_backend_dev_name(dev));
        }
        bufs_.emplace_back(buf);
        // Masked cells are still read by the attention: zeros, never NaN garbage.
        ggml_backend_buffer_clear(buf, 0);
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    }
}

int32_t KvCache::n_kv_for(int32_t n) const { return std::min(n_cells_, (int32_t) GGML_PAD(n, pad())); }

size_t KvCache::bytes() const {
    size_t n = 0;
    for (const auto & b : bufs_) n += ggml_backend_buffer_get_size(b.get());
    return n;
}

}  // namespace psl
