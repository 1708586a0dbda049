// A sequence's state as bytes (prompt caches, state files): its tokens and the K/V rows of their
// cells, layer by layer. The header names the layout (layer count, each layer's types and row
// sizes), so a blob of another model or cache type is refused before anything changes; a set
// replaces the sequence only once the blob is known to fit. Hybrid models (a recurrent state
// per sequence) are not covered yet: their state is refused with PSL_ERR_UNSUPPORTED.
#include "memory/memory.h"

#include "error.h"

#include <algorithm>
#include <cstring>

namespace psl {

namespace {

constexpr uint32_t MAGIC = 0x53534c50;     // "PLSS" little-endian
constexpr uint32_t VERSION = 1;

struct Header {
    uint32_t magic, version, n_tensors, n_tokens;
};

struct TensorInfo {                         // one K or V tensor of a layer
    int32_t type;
    uint32_t pad;
    uint64_t row_bytes;
};

// Runs of consecutive cells for positions 0..n of seq: (first cell, first position, length).
template <typename F> void cell_runs(const KvCells & cells, int32_t seq, int32_t n, F f) {
    int32_t p = 0;
    while (p < n) {
        const int32_t c0 = cells.cell_at(seq, p);
        int32_t len = 1;
        while (p + len < n && cells.cell_at(seq, p + len) == c0 + len) ++len;
        f(c0, p, len);
        p += len;
    }
}

}  // namespace

size_t Memory::state_size(int32_t seq) const {
    if (rs_) fail(PSL_ERR_UNSUPPORTED, "the state of a hybrid model's sequence (its recurrent state) cannot be saved yet");
    const int32_t n = n_past(seq);
    if ((int32_t) history_[seq].size() != n || replay_[seq] >= 0 || cells().n_scratch(seq)) {
        fail(PSL_ERR_UNSUPPORTED, "sequence %d is between evaluations (a replay or a draft pending): its state cannot be "
             "saved now", seq);
    }
    size_t bytes = sizeof(Header) + sizeof(int32_t) * (size_t) n;
    for (ggml_tensor * t : kv_->tensors()) bytes += sizeof(TensorInfo) + t->nb[1] * (size_t) n;
    return bytes;
}

void Memory::state_get(int32_t seq, uint8_t * dst, size_t cap) const {
    const size_t need = state_size(seq);
    if (cap < need) fail(PSL_ERR_BUFFER_TOO_SMALL, "the state of sequence %d takes %zu bytes, the buffer %zu", seq, need, cap);
    const int32_t n = n_past(seq);
    const auto ts = kv_->tensors();
    uint8_t * p = dst;
    const Header h{MAGIC, VERSION, (uint32_t) ts.size(), (uint32_t) n};
    std::memcpy(p, &h, sizeof h), p += sizeof h;
    std::memcpy(p, history_[seq].data(), sizeof(int32_t) * (size_t) n), p += sizeof(int32_t) * (size_t) n;
    for (ggml_tensor * t : ts) {
        const TensorInfo info{(int32_t) t->type, 0, (uint64_t) t->nb[1]};
        std::memcpy(p, &info, sizeof info), p += sizeof info;
    }
    for (ggml_tensor * t : ts) {
        const size_t row = t->nb[1];
        cell_runs(cells(), seq, n, [&](int32_t c0, int32_t p0, int32_t len) {
            ggml_backend_tensor_get(t, p + row * (size_t) p0, row * (size_t) c0, row * (size_t) len);
        });
        p += row * (size_t) n;
    }
}

void Memory::state_set(int32_t seq, const uint8_t * src, size_t size) {
    if (rs_) fail(PSL_ERR_UNSUPPORTED, "the state of a hybrid model's sequence (its recurrent state) cannot be loaded yet");
    Header h{};
    if (size < sizeof h) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes is truncated", size);
    std::memcpy(&h, src, sizeof h);
    if (h.magic != MAGIC) fail(PSL_ERR_INVALID_ARGUMENT, "not a pyllamaspec sequence state");
    if (h.version != VERSION) fail(PSL_ERR_INVALID_ARGUMENT, "sequence state version %u, this build reads %u", h.version, VERSION);
    const auto ts = kv_->tensors();
    if (h.n_tensors != ts.size()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the state holds %u cache tensors, this model's context %zu: another model",
             h.n_tensors, ts.size());
    }
    const int32_t n = (int32_t) h.n_tokens;
    if (n < 0 || n >= n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "the state holds %u tokens, the context %d", h.n_tokens, n_ctx_);
    size_t need = sizeof h + sizeof(int32_t) * (size_t) n;
    const uint8_t * infos = src + need;
    for (size_t i = 0; i < ts.size(); ++i) {
        if (size < need + sizeof(TensorInfo)) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes is truncated", size);
        TensorInfo info{};
        std::memcpy(&info, infos + i * sizeof info, sizeof info);
        if (info.type != (int32_t) ts[i]->type || info.row_bytes != (uint64_t) ts[i]->nb[1]) {
            fail(PSL_ERR_INVALID_ARGUMENT, "cache tensor %zu is %s with %llu-byte rows in the state, %s with %zu here: "
                 "another model or cache type", i, ggml_type_name((ggml_type) info.type),
                 (unsigned long long) info.row_bytes, ggml_type_name(ts[i]->type), (size_t) ts[i]->nb[1]);
        }
        need += sizeof info + info.row_bytes * (size_t) n;
    }
    if (size != need) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes, its header says %zu: truncated", size, need);
    if (cells().n_free() + n_past(seq) < n) {
        fail(PSL_ERR_CONTEXT_FULL, "the state holds %d tokens; %d cells are free", n, cells().n_free() + n_past(seq));
    }
    // the blob fits: the sequence is replaced
    const int32_t * tokens = (const int32_t *) (src + sizeof h);
    truncate(seq, 0);
    for (int32_t p = 0; p < n; ++p) cells().append(free_cell(&seq, 1, nullptr), &seq, 1);
    history_[seq].assign(tokens, tokens + n);
    replay_[seq] = -1;
    const uint8_t * rows = infos + ts.size() * sizeof(TensorInfo);
    for (ggml_tensor * t : ts) {
        const size_t row = t->nb[1];
        cell_runs(cells(), seq, n, [&](int32_t c0, int32_t p0, int32_t len) {
            ggml_backend_tensor_set(t, rows + row * (size_t) p0, row * (size_t) c0, row * (size_t) len);
        });
        rows += row * (size_t) n;
    }
}

}  // namespace psl
