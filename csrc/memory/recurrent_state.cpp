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

RecurrentState::RecurrentState(const psl_model & m, int32_t n_snap, int32_t n_seq) : n_snap_(n_snap), seqs_((size_t) n_seq) {
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
        const int64_t rows = (int64_t) n_seq * (n_snap + 1);
        conv_.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm.conv_row(), rows));
        ssm_.push_back(ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp.ssm.state_row(), rows));
    }
    for (auto & [dev, ctx] : ctxs_) {
        ggml_backend_buffer_type_t buft = ggml_backend_dev_buffer_type(dev);
        ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx.get(), buft);
        if (!buf) {
            fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the recurrent state (%d snapshots)",
                 ggml_backend_alloc_ctx_tensors_from_buft_size(ctx.get(), buft) / 1048576.0, n_snap);
        }
        bufs_.emplace_back(buf);
        ggml_backend_buffer_clear(buf, 0);   // each ring's row K, the state before any token, stays zero
        ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_COMPUTE);
    }
}

size_t RecurrentState::bytes() const {
    size_t n = 0;
    for (const auto & b : bufs_) n += ggml_backend_buffer_get_size(b.get());
    return n;
}

std::vector<ggml_tensor *> RecurrentState::tensors() const {
    std::vector<ggml_tensor *> out;
    for (size_t il = 0; il < conv_.size(); ++il) {
        for (ggml_tensor * t : {conv_[il], ssm_[il]}) {
            if (t) out.push_back(t);
        }
    }
    return out;
}

void RecurrentState::fill_inputs(ggml_tensor * src, ggml_tensor * dst, ggml_tensor * dst_old, int32_t seq,
                                 int32_t n_past, int32_t n_tokens) {
    if (src && src->buffer) {
        const int32_t r = n_past == 0 ? zero_row(seq) : row(seq, n_past - 1);
        ggml_backend_tensor_set(src, &r, 0, sizeof(r));
    }
    const int32_t n = n_tokens, kg = n_written(n);
    idx_.resize(kg);
    if (dst && dst->buffer) {
        for (int32_t s = 0; s < kg; ++s) idx_[s] = row(seq, n_past + n - 1 - s);
        ggml_backend_tensor_set(dst, idx_.data(), 0, sizeof(int64_t) * (size_t) kg);
    }
    if (dst_old && dst_old->buffer) {
        for (int32_t j = 0; j < kg; ++j) idx_[j] = row(seq, n_past + n - kg + j);
        ggml_backend_tensor_set(dst_old, idx_.data(), 0, sizeof(int64_t) * (size_t) kg);
    }
}

void RecurrentState::begin_batch(int32_t seq, int32_t n_past, int32_t n_tokens) {
    Seq & s = seqs_[seq];
    s.lo = std::max(s.lo, n_past + n_tokens - n_snap_);
    s.history.resize(n_past);
}

void RecurrentState::end_batch(int32_t seq, const int32_t * tokens, int32_t n) {
    auto & h = seqs_[seq].history;
    h.insert(h.end(), tokens, tokens + n);
}

bool RecurrentState::rollback(int32_t seq, int32_t n_keep) {
    Seq & s = seqs_[seq];
    if (n_keep == 0) {
        s.lo = 0;
        s.history.clear();
        return true;
    }
    if (n_keep - 1 >= s.lo && n_keep <= (int32_t) s.history.size()) {
        s.history.resize(n_keep);
        return true;
    }
    return false;
}

bool RecurrentState::copy(int32_t src, int32_t dst, int32_t n) {
    const Seq & from = seqs_[src];
    if (src == dst) return rollback(dst, n);
    if (n > 0 && !(n - 1 >= from.lo && n <= (int32_t) from.history.size())) return false;
    Seq & to = seqs_[dst];
    to.history.assign(from.history.begin(), from.history.begin() + n);
    to.lo = n > 0 ? n - 1 : 0;
    if (n == 0) return true;
    // the state after position n - 1, row to row in every layer (through the host: a row is a
    // layer's whole state, copied once per sequence that takes a shared prefix)
    std::vector<uint8_t> buf;
    for (size_t il = 0; il < conv_.size(); ++il) {
        for (ggml_tensor * t : {conv_[il], ssm_[il]}) {
            if (!t) continue;
            buf.resize(t->nb[1]);
            ggml_backend_tensor_get(t, buf.data(), (size_t) row(src, n - 1) * t->nb[1], t->nb[1]);
            ggml_backend_tensor_set(t, buf.data(), (size_t) row(dst, n - 1) * t->nb[1], t->nb[1]);
        }
    }
    return true;
}

}  // namespace psl
