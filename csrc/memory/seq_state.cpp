// A sequence's state as bytes (prompt caches, state files): its tokens and the K/V rows of their
// cells, layer by layer; for a hybrid model (version 2) also the recurrent states its ring holds,
// those after its last positions (up to the ring's length), so that a restored sequence rolls
// back as far as the saved one could. The header names the layout (tensor counts, each tensor's
// type and row size), so a blob of another model or cache type is refused before anything
// changes; a set replaces the sequence only once the blob is known to fit.
#include "memory/memory.h"

#include "error.h"

#include <algorithm>
#include <cstring>

namespace psl {

namespace {

constexpr uint32_t MAGIC = 0x53534c50;     // "PLSS" little-endian
constexpr uint32_t VERSION_KV = 1;         // K/V rows only
constexpr uint32_t VERSION_HYBRID = 2;     // then the recurrent states
// or'ed into the version when the sequence holds images (row_spans.h): after everything else,
// uint32 n_spans then n_spans RowSpans (4 int32 each); files without images are as before
constexpr uint32_t VERSION_SPANS = 0x100;

struct Header {
    uint32_t magic, version, n_tensors, n_tokens;
};

struct RsHeader {                           // version 2: after the K/V tensors' infos
    uint32_t n_tensors, n_rows;             // state tensors; positions n_tokens - n_rows .. n_tokens - 1
};

struct TensorInfo {                         // one K, V or recurrent state tensor
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

// Reads infos of ts from src at `at` (checking each against ts), returns the bytes their rows
// take for `rows` rows each.
size_t check_infos(const uint8_t * src, size_t size, size_t at, const std::vector<ggml_tensor *> & ts, size_t rows,
                   const char * what) {
    size_t need = 0;
    for (size_t i = 0; i < ts.size(); ++i) {
        if (size < at + (i + 1) * sizeof(TensorInfo)) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes is truncated", size);
        TensorInfo info{};
        std::memcpy(&info, src + at + i * sizeof info, sizeof info);
        if (info.type != (int32_t) ts[i]->type || info.row_bytes != (uint64_t) ts[i]->nb[1]) {
            fail(PSL_ERR_INVALID_ARGUMENT, "%s tensor %zu is %s with %llu-byte rows in the state, %s with %zu here: "
                 "another model or cache type", what, i, ggml_type_name((ggml_type) info.type),
                 (unsigned long long) info.row_bytes, ggml_type_name(ts[i]->type), (size_t) ts[i]->nb[1]);
        }
        need += info.row_bytes * rows;
    }
    return need;
}

void put_infos(uint8_t *& p, const std::vector<ggml_tensor *> & ts) {
    for (ggml_tensor * t : ts) {
        const TensorInfo info{(int32_t) t->type, 0, (uint64_t) t->nb[1]};
        std::memcpy(p, &info, sizeof info), p += sizeof info;
    }
}

constexpr uint32_t CHECKPOINT_MAGIC = 0x4b434c50;   // "PLCK"

struct CheckpointHeader {
    uint32_t magic, n_tensors, n_tokens, pad;
    uint64_t hash;                           // of the tokens it follows (FNV-1a)
};

uint64_t hash_bytes(uint64_t h, const void * data, size_t n) {
    for (const uint8_t * p = (const uint8_t *) data, * e = p + n; p < e; ++p) h = (h ^ *p) * 1099511628211ull;
    return h;
}

// the tokens, and the layout of the images placed 2-D among them (none: the hash of before)
uint64_t hash_tokens(const int32_t * t, int32_t n, const std::vector<RowSpan> & spans) {
    uint64_t h = hash_bytes(1469598103934665603ull, t, sizeof(int32_t) * (size_t) n);
    for (const RowSpan & s : spans) {
        if (s.grid() && s.first + s.n <= n) h = hash_bytes(h, &s, sizeof s);
    }
    return h;
}

size_t spans_bytes(const std::vector<RowSpan> & spans) {
    return spans.empty() ? 0 : sizeof(uint32_t) + sizeof(RowSpan) * spans.size();
}

// A state's spans (at src, size bytes left), checked against its n tokens.
std::vector<RowSpan> read_spans(const uint8_t * src, size_t size, int32_t n) {
    uint32_t k = 0;
    if (size < sizeof k) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state's images are truncated");
    std::memcpy(&k, src, sizeof k);
    if (k == 0 || size != sizeof k + sizeof(RowSpan) * (size_t) k) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state's images (%u) do not fill its %zu bytes: a broken state", k, size);
    }
    std::vector<RowSpan> v(k);
    std::memcpy(v.data(), src + sizeof k, sizeof(RowSpan) * k);
    int32_t end = 0;
    for (const RowSpan & s : v) {
        const bool grid_ok = (s.nx == 0 && s.ny == 0) || (s.nx > 0 && s.ny > 0 && (int64_t) s.nx * s.ny == s.n);
        if (s.first < end || s.n <= 0 || (int64_t) s.first + s.n > n || !grid_ok) {
            fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state's image at %d (%d rows, %d x %d) does not fit its %d "
                 "tokens: a broken state", s.first, s.n, s.nx, s.ny, n);
        }
        end = s.first + s.n;
    }
    return v;
}

}  // namespace

int32_t Memory::state_rs_rows(int32_t seq) const {
    const int32_t n = n_past(seq);
    return rs_ && n > 0 ? std::min(rs_->n_snap(), n - rs_->lo(seq)) : 0;
}

size_t Memory::state_size(int32_t seq) const {
    const int32_t n = n_past(seq);
    if ((int32_t) history(seq).size() != n || replay_[seq] >= 0 || cells().n_scratch(seq)) {
        fail(PSL_ERR_UNSUPPORTED, "sequence %d is between evaluations (a replay or a draft pending): its state cannot be "
             "saved now", seq);
    }
    if (rs_ && n > 0 && state_rs_rows(seq) < 1) fail(PSL_ERR_UNSUPPORTED, "sequence %d holds no recurrent state", seq);
    size_t bytes = sizeof(Header) + sizeof(int32_t) * (size_t) n;
    for (ggml_tensor * t : kv_->tensors()) bytes += sizeof(TensorInfo) + t->nb[1] * (size_t) n;
    if (rs_) {
        bytes += sizeof(RsHeader);
        for (ggml_tensor * t : rs_->tensors()) bytes += sizeof(TensorInfo) + t->nb[1] * (size_t) state_rs_rows(seq);
    }
    return bytes + spans_bytes(spans_.of(seq));
}

void Memory::state_get(int32_t seq, uint8_t * dst, size_t cap) const {
    const size_t need = state_size(seq);
    if (cap < need) fail(PSL_ERR_BUFFER_TOO_SMALL, "the state of sequence %d takes %zu bytes, the buffer %zu", seq, need, cap);
    const int32_t n = n_past(seq), n_rows = state_rs_rows(seq);
    const auto ts = kv_->tensors();
    uint8_t * p = dst;
    const std::vector<RowSpan> & spans = spans_.of(seq);
    const uint32_t version = (rs_ ? VERSION_HYBRID : VERSION_KV) | (spans.empty() ? 0 : VERSION_SPANS);
    const Header h{MAGIC, version, (uint32_t) ts.size(), (uint32_t) n};
    std::memcpy(p, &h, sizeof h), p += sizeof h;
    std::memcpy(p, history(seq).data(), sizeof(int32_t) * (size_t) n), p += sizeof(int32_t) * (size_t) n;
    put_infos(p, ts);
    std::vector<ggml_tensor *> rts;
    if (rs_) {
        rts = rs_->tensors();
        const RsHeader r{(uint32_t) rts.size(), (uint32_t) n_rows};
        std::memcpy(p, &r, sizeof r), p += sizeof r;
        put_infos(p, rts);
    }
    for (ggml_tensor * t : ts) {
        const size_t row = t->nb[1];
        cell_runs(cells(), seq, n, [&](int32_t c0, int32_t p0, int32_t len) {
            ggml_backend_tensor_get(t, p + row * (size_t) p0, row * (size_t) c0, row * (size_t) len);
        });
        p += row * (size_t) n;
    }
    for (ggml_tensor * t : rts) {   // the states after positions n - n_rows .. n - 1, oldest first
        for (int32_t pos = n - n_rows; pos < n; ++pos) {
            ggml_backend_tensor_get(t, p, rs_->offset(t, seq, pos), t->nb[1]);
            p += t->nb[1];
        }
    }
    if (!spans.empty()) {
        const uint32_t k = (uint32_t) spans.size();
        std::memcpy(p, &k, sizeof k), p += sizeof k;
        std::memcpy(p, spans.data(), sizeof(RowSpan) * k);
    }
}

void Memory::state_set(int32_t seq, const uint8_t * src, size_t size) {
    Header h{};
    if (size < sizeof h) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes is truncated", size);
    std::memcpy(&h, src, sizeof h);
    if (h.magic != MAGIC) fail(PSL_ERR_INVALID_ARGUMENT, "not a pyllamaspec sequence state");
    const uint32_t version = rs_ ? VERSION_HYBRID : VERSION_KV;
    const bool has_spans = (h.version & VERSION_SPANS) != 0;
    h.version &= ~VERSION_SPANS;
    if (h.version != version) {
        if (h.version == VERSION_KV || h.version == VERSION_HYBRID) {
            fail(PSL_ERR_INVALID_ARGUMENT, "a state of a %s model, this one is %s: another model",
                 h.version == VERSION_HYBRID ? "hybrid" : "KV-cache-only", rs_ ? "hybrid" : "not");
        }
        fail(PSL_ERR_INVALID_ARGUMENT, "sequence state version %u, this build reads %u and %u", h.version, VERSION_KV,
             VERSION_HYBRID);
    }
    const auto ts = kv_->tensors();
    if (h.n_tensors != ts.size()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the state holds %u cache tensors, this model's context %zu: another model",
             h.n_tensors, ts.size());
    }
    const int32_t n = (int32_t) h.n_tokens;
    if (n < 0 || n >= n_ctx_) fail(PSL_ERR_CONTEXT_FULL, "the state holds %u tokens, the context %d", h.n_tokens, n_ctx_);
    size_t at = sizeof h + sizeof(int32_t) * (size_t) n;
    const size_t infos = at;
    size_t need = at + ts.size() * sizeof(TensorInfo) + check_infos(src, size, at, ts, (size_t) n, "cache");
    at += ts.size() * sizeof(TensorInfo);
    std::vector<ggml_tensor *> rts;
    RsHeader r{0, 0};
    if (rs_) {
        if (size < at + sizeof r) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes is truncated", size);
        std::memcpy(&r, src + at, sizeof r);
        rts = rs_->tensors();
        if (r.n_tensors != rts.size() || (n > 0 && r.n_rows == 0) || (int64_t) r.n_rows > n) {
            fail(PSL_ERR_INVALID_ARGUMENT, "the state holds %u recurrent tensors and %u of its %d states, this model's "
                 "context %zu tensors: another model, or a broken state", r.n_tensors, r.n_rows, n, rts.size());
        }
        at += sizeof r;
        need += sizeof r + rts.size() * sizeof(TensorInfo) + check_infos(src, size, at, rts, r.n_rows, "recurrent");
        at += rts.size() * sizeof(TensorInfo);
    }
    std::vector<RowSpan> spans;
    if (has_spans) {
        if (size < need) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes, its header says %zu: truncated", size, need);
        spans = read_spans(src + need, size - need, n);
        need = size;
    }
    if (size != need) fail(PSL_ERR_INVALID_ARGUMENT, "a sequence state of %zu bytes, its header says %zu: truncated", size, need);
    if (cells().n_free() + n_past(seq) < n) {
        fail(PSL_ERR_CONTEXT_FULL, "the state holds %d tokens; %d cells are free", n, cells().n_free() + n_past(seq));
    }
    // the blob fits: the sequence is replaced
    const int32_t * tokens = (const int32_t *) (src + sizeof h);
    truncate(seq, 0);
    for (int32_t p = 0; p < n; ++p) cells().append(free_cell(&seq, 1, nullptr), &seq, 1);
    replay_[seq] = -1;
    spans_.set(seq, std::move(spans));
    const uint8_t * rows = src + infos + ts.size() * sizeof(TensorInfo) + (rs_ ? sizeof r + rts.size() * sizeof(TensorInfo) : 0);
    for (ggml_tensor * t : ts) {
        const size_t row = t->nb[1];
        cell_runs(cells(), seq, n, [&](int32_t c0, int32_t p0, int32_t len) {
            ggml_backend_tensor_set(t, rows + row * (size_t) p0, row * (size_t) c0, row * (size_t) len);
        });
        rows += row * (size_t) n;
    }
    if (!rs_) {
        history_[seq].assign(tokens, tokens + n);
        return;
    }
    // the ring takes the newest states it has room for (another PYLLAMASPEC_RS_SNAPSHOTS may
    // have saved more)
    const int32_t keep = std::min((int32_t) r.n_rows, rs_->n_snap());
    for (ggml_tensor * t : rts) {
        rows += t->nb[1] * (size_t) (r.n_rows - keep);
        for (int32_t pos = n - keep; pos < n; ++pos) {
            ggml_backend_tensor_set(t, rows, rs_->offset(t, seq, pos), t->nb[1]);
            rows += t->nb[1];
        }
    }
    rs_->restore(seq, std::vector<int32_t>(tokens, tokens + n), n - keep);
}

size_t Memory::checkpoint_size(int32_t seq) const {
    if (!rs_) fail(PSL_ERR_UNSUPPORTED, "checkpoints are for a hybrid model's recurrent state; this cache rolls back exactly");
    if (n_past(seq) == 0 || replay_[seq] >= 0 || cells().n_scratch(seq)) {
        fail(PSL_ERR_UNSUPPORTED, "sequence %d is empty or between evaluations: no checkpoint now", seq);
    }
    size_t bytes = sizeof(CheckpointHeader);
    for (ggml_tensor * t : rs_->tensors()) bytes += sizeof(TensorInfo) + t->nb[1];
    return bytes;
}

void Memory::checkpoint_get(int32_t seq, uint8_t * dst, size_t cap) const {
    const size_t need = checkpoint_size(seq);
    if (cap < need) fail(PSL_ERR_BUFFER_TOO_SMALL, "the checkpoint of sequence %d takes %zu bytes, the buffer %zu", seq, need, cap);
    const int32_t n = n_past(seq);
    const auto rts = rs_->tensors();
    const CheckpointHeader h{CHECKPOINT_MAGIC, (uint32_t) rts.size(), (uint32_t) n, 0, hash_tokens(history(seq).data(), n, spans_.of(seq))};
    uint8_t * p = dst;
    std::memcpy(p, &h, sizeof h), p += sizeof h;
    put_infos(p, rts);
    for (ggml_tensor * t : rts) {
        ggml_backend_tensor_get(t, p, rs_->offset(t, seq, n - 1), t->nb[1]);
        p += t->nb[1];
    }
}

void Memory::checkpoint_set(int32_t seq, const uint8_t * src, size_t size) {
    if (!rs_) fail(PSL_ERR_UNSUPPORTED, "checkpoints are for a hybrid model's recurrent state; this cache rolls back exactly");
    CheckpointHeader h{};
    if (size < sizeof h) fail(PSL_ERR_INVALID_ARGUMENT, "a checkpoint of %zu bytes is truncated", size);
    std::memcpy(&h, src, sizeof h);
    if (h.magic != CHECKPOINT_MAGIC) fail(PSL_ERR_INVALID_ARGUMENT, "not a pyllamaspec checkpoint");
    const auto rts = rs_->tensors();
    if (h.n_tensors != rts.size()) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the checkpoint holds %u recurrent tensors, this model's context %zu: another model",
             h.n_tensors, rts.size());
    }
    const size_t need = sizeof h + rts.size() * sizeof(TensorInfo) + check_infos(src, size, sizeof h, rts, 1, "recurrent");
    if (size != need) fail(PSL_ERR_INVALID_ARGUMENT, "a checkpoint of %zu bytes, its header says %zu: truncated", size, need);
    const int32_t n = (int32_t) h.n_tokens;
    if (n != n_past(seq) || n == 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a checkpoint at %u tokens; sequence %d holds %d (truncate it there first)", h.n_tokens,
             seq, n_past(seq));
    }
    const std::vector<int32_t> & hist = history(seq);
    if ((int32_t) hist.size() < n || hash_tokens(hist.data(), n, spans_.of(seq)) != h.hash) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a checkpoint of other tokens than sequence %d's first %d", seq, n);
    }
    cells().drop_scratch(seq);
    const uint8_t * rows = src + sizeof h + rts.size() * sizeof(TensorInfo);
    for (ggml_tensor * t : rts) {
        ggml_backend_tensor_set(t, rows, rs_->offset(t, seq, n - 1), t->nb[1]);
        rows += t->nb[1];
    }
    rs_->restore(seq, std::vector<int32_t>(hist.begin(), hist.begin() + n), n - 1);
    replay_[seq] = -1;
}

}  // namespace psl
