// A context's restricted output head (psl_context_set_output_ids / add_output_ids): logits of
// some vocabulary rows only, from a copy of those rows of the output matrix. The copy is
// multiplied by the same kernels as the full head, so its logits are the full head's, bit for
// bit: in plain CPU memory (or on the GPU) when the full head is there, and in the same
// repacking / AMX buffer when the full head was loaded into one (those kernels sum in another
// order than plain vec_dot). A repacked copy holds its rows rounded up to a tile multiple, the
// rest zero, and takes whole uploads only (ggml converts a tensor to its layout in one piece).
#include "engine/context.h"
#include "error.h"
#include "host/compute_thread.h"

#include "ggml-cpp.h"
#include "ggml-cpu.h"

#include <cstring>

using namespace psl;

namespace {

void check_output_id(int32_t id, int32_t i, int32_t n_vocab) {
    if (id < 0 || id >= n_vocab) {
        fail(PSL_ERR_OUT_OF_RANGE, "output id %d at index %d is outside the vocabulary [0, %d)", id, i, n_vocab);
    }
}

// Rows of a repacked head: a multiple of every repacking / AMX kernel's row tile (4, 8, 16, 32).
constexpr int64_t PACKED_ROWS = 64;

// The CPU extra buffer type (repacked, AMX) that t was loaded into, or nullptr.
ggml_backend_buffer_type_t extra_buft_of(const psl_model & m, const ggml_tensor * t) {
    if (!t->buffer) return nullptr;
    ggml_backend_buffer_type_t b = ggml_backend_buffer_get_type(t->buffer);
    auto get_extra = (ggml_backend_dev_get_extra_bufts_t) ggml_backend_reg_get_proc_address(
        ggml_backend_dev_backend_reg(m.dev_cpu), "ggml_backend_dev_get_extra_bufts");
    for (ggml_backend_buffer_type_t * e = get_extra ? get_extra(m.dev_cpu) : nullptr; e && *e; ++e) {
        if (*e == b) return b;
    }
    return nullptr;
}

}  // namespace

void psl_context::free_head() {
    head = nullptr;
    head_packed = false;
    head_buf.reset();
    head_ctx.reset();
    head_ids.clear();
    head_has.clear();
}

// The file's output rows of ids[0..n) into dst, one row (head->nb[1] bytes) after another.
void psl_context::read_head_rows(const int32_t * ids, int32_t n, uint8_t * dst) const {
    const psl::TensorSource * src = model->files->find(ggml_get_name(model->output));
    if (!src) psl::fail(PSL_ERR_INTERNAL, "tensor '%s' not found", ggml_get_name(model->output));
    const psl::GgufFile & f = *src->file;   // the shard that holds the head
    const size_t row = head->nb[1];
    for (int32_t i = 0; i < n; ++i) {
        const size_t off = src->offset + (size_t) ids[i] * row;
        if (f.mapping()) {
            memcpy(dst + (size_t) i * row, f.mapping() + off, row);
        } else {
            f.read(off, dst + (size_t) i * row, row);
        }
    }
}

// Rows ids[0..n) of the file's head into head rows first_row... (the rows before first_row are
// head_ids[0..first_row)).
void psl_context::copy_head_rows(const int32_t * ids, int32_t n, int32_t first_row) {
    const size_t row = head->nb[1];
    if (head_packed) {                       // the whole head again, from the file
        std::vector<uint8_t> staging(ggml_nbytes(head), 0);
        read_head_rows(head_ids.data(), first_row, staging.data());
        read_head_rows(ids, n, staging.data() + (size_t) first_row * row);
        psl::upload(head, staging.data(), 0, staging.size());
        return;
    }
    // straight into the head when it is in host memory, else through a staging copy
    const bool host = ggml_backend_buffer_is_host(head_buf.get());
    std::vector<uint8_t> staging(host ? 0 : row * (size_t) n);
    uint8_t * dst = host ? (uint8_t *) head->data + (size_t) first_row * row : staging.data();
    read_head_rows(ids, n, dst);
    if (!host) psl::upload(head, staging.data(), (size_t) first_row * row, staging.size());
}

void psl_context::set_output_ids(const int32_t * ids, int32_t n) {
    const int32_t n_vocab = model->hp.n_vocab;
    std::vector<uint8_t> seen((size_t) n_vocab, 0);
    for (int32_t i = 0; i < n; ++i) {
        check_output_id(ids[i], i, n_vocab);
        if (seen[ids[i]]++) fail(PSL_ERR_INVALID_ARGUMENT, "output id %d appears twice", ids[i]);
    }
    free_head();
    graph_tokens = -1;                       // the next eval builds a graph with the new head
    if (n == 0) return;

    const ggml_tensor * src = model->output;
    // next to the full head: on the GPU if it was offloaded, in its repacking / AMX buffer if it
    // was loaded into one and that buffer takes this shape, else in plain CPU memory
    ggml_backend_buffer_type_t buft = ggml_backend_cpu_buffer_type();
    int64_t room = std::min<int64_t>(n_vocab, (int64_t) n + std::max<int64_t>(1024, n / 8));
    head_ctx.reset(ggml_init({ggml_tensor_overhead() * 2, nullptr, /*no_alloc =*/ true}));
    if (!head_ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the output head's context");
    if (model->output_device() != model->dev_cpu) {
        buft = ggml_backend_dev_buffer_type(model->output_device());
    } else if (ggml_backend_buffer_type_t extra = extra_buft_of(*model, src)) {
        // no spare rows: each one is multiplied at every eval
        const int64_t rows = (n + PACKED_ROWS - 1) / PACKED_ROWS * PACKED_ROWS;
        ggml_context_ptr probe_ctx(ggml_init({ggml_tensor_overhead(), nullptr, /*no_alloc =*/ true}));
        if (!probe_ctx) fail(PSL_ERR_OUT_OF_MEMORY, "cannot create the output head's context");
        ggml_tensor * probe = ggml_new_tensor_2d(probe_ctx.get(), src->type, src->ne[0], rows);
        if (psl::cpu_supports_matmul(model->dev_cpu, extra, probe, 0)) {
            buft = extra, room = rows, head_packed = true;
        }
    }
    head = ggml_new_tensor_2d(head_ctx.get(), src->type, src->ne[0], room);
    ggml_set_name(head, "output_ids.weight");
    head_buf.reset(ggml_backend_alloc_ctx_tensors_from_buft(head_ctx.get(), buft));
    if (!head_buf) {
        const double mib = ggml_nbytes(head) / 1048576.0;
        free_head();
        fail(PSL_ERR_OUT_OF_MEMORY, "cannot allocate %.1f MiB for the output head", mib);
    }
    ggml_backend_buffer_set_usage(head_buf.get(), GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    try {
        copy_head_rows(ids, n, 0);
    } catch (...) {
        free_head();
        throw;
    }
    head_ids.assign(ids, ids + n);
    head_has = std::move(seen);
    // The full head's mapped pages need not stay resident: embedding lookups (a tied head)
    // fault in the few rows they read, and the page cache keeps the rest at hand.
    const ggml_tensor * full = model->output;
    const psl::TensorSource * from = model->files->find(ggml_get_name(full));
    const psl::GgufFile * f = from ? from->file : nullptr;   // the shard that holds it
    if (f && f->mapping() && full->data >= (const void *) f->mapping() &&
        (const uint8_t *) full->data < f->mapping() + f->file_size()) {
        f->release((size_t) ((const uint8_t *) full->data - f->mapping()), ggml_nbytes(full));
    }
}

void psl_context::add_output_ids(const int32_t * ids, int32_t n) {
    if (!head) fail(PSL_ERR_INVALID_ARGUMENT, "the output head is not restricted (psl_context_set_output_ids)");
    const int32_t n_vocab = model->hp.n_vocab;
    std::vector<int32_t> fresh;
    for (int32_t i = 0; i < n; ++i) {
        check_output_id(ids[i], i, n_vocab);
        if (!head_has[ids[i]]) {
            head_has[ids[i]] = 1;             // also drops repeats within ids
            fresh.push_back(ids[i]);
        }
    }
    if (fresh.empty()) return;
    if ((int64_t) (head_ids.size() + fresh.size()) > head->ne[1]) {
        std::vector<int32_t> all = head_ids;  // out of room: rebuild with more
        all.insert(all.end(), fresh.begin(), fresh.end());
        set_output_ids(all.data(), (int32_t) all.size());
        return;
    }
    try {
        copy_head_rows(fresh.data(), (int32_t) fresh.size(), (int32_t) head_ids.size());
    } catch (...) {
        for (int32_t id : fresh) head_has[id] = 0;
        throw;
    }
    head_ids.insert(head_ids.end(), fresh.begin(), fresh.end());
    graph_tokens = -1;                       // the graph reads one more row
}
