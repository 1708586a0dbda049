#include "memory/hidden_ring.h"

#include <algorithm>
#include <cstring>

namespace psl {

HiddenRing::HiddenRing(int32_t n_embd, int32_t n_rows)
    : n_embd_(n_embd), n_rows_(n_rows), rows_((size_t) n_rows * n_embd, 0.0f), zeros_((size_t) n_embd, 0.0f) {}

const float * HiddenRing::at(int32_t pos) const {
    if (pos < lo_ || pos >= hi_) return zeros_.data();
    return rows_.data() + (size_t) (pos % n_rows_) * n_embd_;
}

void HiddenRing::store(int32_t n_past, int32_t n, const float * rows) {
    hi_ = std::min(hi_, n_past);   // rows at n_past and later are being replaced
    if (lo_ > hi_) lo_ = hi_;
    const int32_t first = n - kept(n);
    for (int32_t i = first; i < n; ++i) {
        std::memcpy(rows_.data() + (size_t) ((n_past + i) % n_rows_) * n_embd_, rows + (size_t) (i - first) * n_embd_,
                    sizeof(float) * (size_t) n_embd_);
    }
    if (hi_ < n_past) lo_ = n_past;   // a gap: nothing before this batch is known
    hi_ = n_past + n;
    lo_ = std::max(lo_, hi_ - n_rows_);
}

}  // namespace psl
