// The KV cache: one K and (unless MLA) one V tensor per layer over n_ctx cells, and which
// sequence holds which cell at which position (kv_cells.h). Truncation (the speculative
// rollback) just lets cells go; cells no token may see are masked out and overwritten later.
#pragma once

#include "memory/kv_cells.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <utility>
#include <vector>

struct psl_model;

namespace psl {

class KvCache {
public:
    // Every trunk layer's cache, each row as wide as HParams::kv_k_width / kv_v_width (none for
    // V under MLA; a shared layer's tensors are its source's).
    KvCache(const psl_model & m, int32_t n_cells, int32_t n_seq, ggml_type type_k, ggml_type type_v);
    // The MTP block's cache (one more layer at index n_layer), allocated when MTP drafting is
    // switched on, as llama.cpp gives it to its MTP context only.
    void add_mtp_layer(const psl_model & m);
    KvCache(const KvCache &) = delete;
    KvCache & operator=(const KvCache &) = delete;

    int32_t size() const { return n_cells_; }     // cells allocated (a multiple of pad()); cells().size() are used
    KvCells & cells() { return cells_; }
    const KvCells & cells() const { return cells_; }

    // Cells an attention over the first n must read: n rounded up to pad(), within size().
    int32_t n_kv_for(int32_t n) const;
    static constexpr int32_t pad() { return 256; }

    // KvCells::compact, the K/V rows following their cells. Returns old cell -> new (-1: free).
    std::vector<int32_t> compact();
    // The distinct K and V tensors, layer by layer (a shared layer's are its source's).
    std::vector<ggml_tensor *> tensors() const;

    int n_layers() const { return (int) k_.size(); }      // the trunk's, and the MTP block's when added
    ggml_tensor * k(int il) const { return k_[il]; }
    ggml_tensor * v(int il) const { return v_[il]; }
    size_t bytes() const;

private:
    void alloc_layers(const psl_model & m, int first, int last);
    ggml_type type_k_, type_v_;
    int32_t n_cells_;
    KvCells cells_;
    std::vector<ggml_tensor *> k_, v_;
    // owned: a constructor that throws half way frees what it made
    std::vector<std::pair<ggml_backend_dev_t, ggml_context_ptr>> ctxs_;   // one per device
    std::vector<ggml_backend_buffer_ptr> bufs_;
};

}  // namespace psl
