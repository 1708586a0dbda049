#include "memory/kv_cache.h"
#include "host/huge_pages.h"

#include "error.h"
#include "model.h"

#include "ggml-alloc.h"

#include <algorithm>

namespace psl {

KvCache::KvCache(const psl_model & m, int32_t n_cells, int32_t n_seq, ggml_type type_k, ggml_type type_v)
    : type_k_(type_k), type_v_(type_v), n_cells_(GGML_PAD(n_cells, pad())),
      cells_(n_cells, n_seq) {   // the padding is never handed out
    const HParams & hp = m.hp;
    for (int il = 0; il <= std::max(hp.n_layer, m.mtp_layer); ++il) {   // an MTP block's too, for add_mtp_layer
        if ((hp.kv_k_width(il) % ggml_blck_size(type_k)) != 0 || (hp.kv_v_width(il) % ggml_blck_size(type_v)) != 0) {
            fail(PSL_ERR_INVALID_ARGUMENT, "KV cache types %s/%s do not fit a row of %d/%d elements",
                 ggml_type_name(type_k), ggml_type_name(type_v), hp.kv_k_width(il), hp.kv_v_width(il));
        }
    }
    alloc_layers(m, 0, hp.n_layer);
}

void KvCache::add_mtp_layer(const psl_model & m) {
    if (m.mtp_layer >= 0 && (int) k_.size() <= m.mtp_layer) alloc_layers(m, (int) k_.size(), m.mtp_layer + 1);
}

void KvCache::alloc_layers(const psl_model & m, int first, int last) {
    const HParams & hp = m.hp;
    // Each layer's cache sits on the device that runs the layer: one context and buffer per
    // device for this call's layers.
    std::vector<std::pair<ggml_backend_dev_t, ggml_context *>> mine;
    auto ctx_for = [&](ggml_backend_dev_t dev) -> ggml_context * {
        for (auto & [d, c] : mine) {
            if (d == dev) return c;
        }
        ggml_init_params p = {ggml_tensor_overhead() * (2 * (size_t) (last - first) + 4), nullptr, true};
        ggml_context_ptr ctx(ggml_init(p));
        if (!ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the KV cache context");
        ctxs_.emplace_back(dev, std::move(ctx));
        mine.emplace_back(dev, ctxs_.back().second.get());
        return mine.back().second;
    };
    for (int il = first; il < last; ++il) {
        if (hp.is_recurrent(il)) {   // a hybrid's linear-attention layer keeps a recurrent state instead
            k_.push_back(nullptr);
            v_.push_back(nullptr);
            continue;
        }
        const int src = il < hp.n_layer ? hp.kv_source(il) : il;
        if (src != il) {             // a shared layer (gemma4) reads an earlier layer's cache
            k_.push_back(k_[src]);
            v_.push_back(v_[src]);
            continue;
        }
        ggml_context * ctx = ctx_for(m.layer_device(il));
        k_.push_back(ggml_new_tensor_2d(ctx, type_k_, hp.kv_k_width(il), n_cells_));
        // MLA caches no V: it is the latent at the start of each K row
        v_.push_back(hp.kv_v_width(il) > 0 ? ggml_new_tensor_2d(ctx, type_v_, hp.kv_v_width(il), n_cells_) : nullptr);
    }
    for (auto & [dev, ctx] : mine) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft);
        if (!buf) {
            fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the KV cache (%d cells) on %s",
                 ggml_backend_alloc_ctx_tensors_from_buft_size(ctx, buft) / 1048576.0, n_cells_,
                 ggml_backend_dev_name(dev));
        }
        bufs_.emplace_back(buf);
        advise_huge_pages(buf);
        // Masked cells are still read by the attention: zeros, never NaN garbage.
        ggml_backend_buffer_clear(buf, 0);
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    }
}

int32_t KvCache::n_kv_for(int32_t n) const { return std::min(n_cells_, (int32_t) GGML_PAD(n, pad())); }

std::vector<ggml_tensor *> KvCache::tensors() const {
    std::vector<ggml_tensor *> out;
    for (int il = 0; il < n_layers(); ++il) {
        for (ggml_tensor * t : {k_[il], v_[il]}) {
            if (t && std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
        }
    }
    return out;
}

// Rows move run by run, downwards and in order: none is overwritten before it is read. Through
// host memory, which is fine for how rarely this runs (Memory::free_cell).
std::vector<int32_t> KvCache::compact() {
    std::vector<int32_t> to = cells_.compact();
    const int32_t n = (int32_t) to.size();
    std::vector<uint8_t> buf;
    for (ggml_tensor * t : tensors()) {
        const size_t row = t->nb[1];
        for (int32_t c = 0; c < n;) {
            if (to[c] < 0 || to[c] == c) {
                ++c;
                continue;
            }
            int32_t len = 1;
            while (c + len < n && to[c + len] == to[c] + len) ++len;
            buf.resize(row * (size_t) len);
            ggml_backend_tensor_get(t, buf.data(), row * (size_t) c, buf.size());
            ggml_backend_tensor_set(t, buf.data(), row * (size_t) to[c], buf.size());
            c += len;
        }
    }
    return to;
}

size_t KvCache::bytes() const {
    size_t n = 0;
    for (const auto & b : bufs_) n += ggml_backend_buffer_get_size(b.get());
    return n;
}

}  // namespace psl
