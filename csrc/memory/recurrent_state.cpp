#include "memory/recurrent_state.h"

#include "error.h"
#include "model.h"

#include "ggml-alloc.h"

#include <algorithm>
#include <cstdlib>

namespace psl {

int32_t recurrent_snapshots() {
    const char * env = std::getenv("PYLLAMASPEC_RS_SNAPSHOTS");
    if (!env || !*env) return 17;
    char * end = nullptr;
    const long n = std::strtol(env, &end, 10);
    if (*end || n < 1 || n > 4096) {
        fail(PSL_ERR_INVALID_ARGUMENT, "PYLLAMASPEC_RS_SNAPSHOTS must be an integer in [1, 4096], got '%s'", env);
    }
    return (int32_t) n;
}

RecurrentState::RecurrentState(const psl_model & m, int32_t n_snap) : n_snap_(n_snap) {
    const HParams & hp = m.hp;
    if (n_snap < 1) fail(PSL_ERR_INVALID_ARGUMENT, "the recurrent state needs at least one snapshot (got %d)", n_snap);
    // each layer's state sits on the device that runs the layer (a GPU, an RPC server, the CPU)
    auto ctx_for = [&](ggml_backend_dev_t dev) -> ggml_context * {
        for (auto & [d, c] : ctxs_) {
            if (d == dev) return c.get();
        }
        ggml_init_params p = {ggml_tensor_overhead() * (2 * (size_t) hp.n_layer + 2), nullptr, true};
        ggml_context_ptr ctx(ggml_init(p));
        if (!ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the recurrent state context");
        ctxs_.emplace_back(dev, std::move(ctx));
        return ctxs_.back().second.get();
    };
    for (int il = 0; il < hp.n_layer; ++il) {
        if (!hp.is_recurrent(il)) {
            conv_.push_back(nullptr);
            ssm_.push_back(nullptr);
            continue;
        }
        ggml_context * ctx = ctx_for(m.layer_device(il));
        conv_.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm.conv_row(), n_snap + 1));
        ssm_.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm.state_row(), n_snap + 1));
    }
    for (auto & [dev, ctx] : ctxs_) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);
        if (!buf) {
            fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the recurrent state (%d snapshots)",
                 ggml_backend_alloc_ctx_tensors_from_buft_size(ctx.get(), buft) / 1048576.0, n_snap);
        }
        bufs_.emplace_back(buf);
        ggml_backend_buffer_clear(buf, 0);   // row K, the state before any token, stays zero
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    }
}

size_t RecurrentState::bytes() const {
    size_t n = 0;
    for (const auto & b : bufs_) n += ggml_backend_buffer_get_size(b.get());
    return n;
}

void RecurrentState::fill_inputs(ggml_tensor * src, ggml_tensor * dst, ggml_tensor * dst_old, int32_t n_past,
                                 int32_t n_tokens) {
    if (src && src->buffer) {
        const int32_t row = n_past == 0 ? n_snap_ : (n_past - 1) % n_snap_;
        ggml_backend_tensor_set(src, &row, 0, sizeof(row));
    }
    const int32_t n = n_tokens, kg = n_written(n);
    idx_.resize(kg);
    if (dst && dst->buffer) {
        for (int32_t s = 0; s < kg; ++s) idx_[s] = (n_past + n - 1 - s) % n_snap_;
        ggml_backend_tensor_set(dst, idx_.data(), 0, sizeof(int64_t) * (size_t) kg);
    }
    if (dst_old && dst_old->buffer) {
        for (int32_t j = 0; j < kg; ++j) idx_[j] = (n_past + n - kg + j) % n_snap_;
        ggml_backend_tensor_set(dst_old, idx_.data(), 0, sizeof(int64_t) * (size_t) kg);
    }
}

void RecurrentState::begin_batch(int32_t n_past, int32_t n_tokens) {
    lo_ = std::max(lo_, n_past + n_tokens - n_snap_);
    history_.resize(n_past);
}

void RecurrentState::end_batch(const int32_t * tokens, int32_t n) { history_.insert(history_.end(), tokens, tokens + n); }

bool RecurrentState::rollback(int32_t n_keep) {
    if (n_keep == 0) {
        lo_ = 0;
        history_.clear();
        return true;
    }
    if (n_keep - 1 >= lo_ && n_keep <= (int32_t) history_.size()) {
        history_.resize(n_keep);
        return true;
    }
    return false;
}

}  // namespace psl
