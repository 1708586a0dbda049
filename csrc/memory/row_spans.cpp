// The M-RoPE positions of a sequence's images (row_spans.h).
#include "memory/row_spans.h"

#include <algorithm>

namespace psl {

int32_t RowSpans::rope_t(int32_t seq, int32_t p) const {
    int32_t r = p;
    for (const RowSpan & s : seqs_[seq]) {
        if (s.first >= p) break;
        if (!s.grid()) continue;
        if (p < s.first + s.n) return r - (p - s.first);   // a row: the image's own t
        r -= s.n - std::max(s.nx, s.ny);
    }
    return r;
}

void RowSpans::rope_pos(int32_t seq, int32_t p, int32_t out[4]) const {
    const int32_t t = rope_t(seq, p);
    out[0] = out[1] = out[2] = t, out[3] = 0;
    for (const RowSpan & s : seqs_[seq]) {
        if (s.first > p) break;
        if (s.grid() && p < s.first + s.n) {
            const int32_t i = p - s.first;
            out[1] = t + i / s.nx, out[2] = t + i % s.nx;
            return;
        }
    }
}

bool RowSpans::cuts(int32_t seq, int32_t n_keep) const {
    for (const RowSpan & s : seqs_[seq]) {
        if (s.grid() && s.first < n_keep && n_keep < s.first + s.n) return true;
    }
    return false;
}

bool RowSpans::any_below(int32_t seq, int32_t n) const {
    return std::any_of(seqs_[seq].begin(), seqs_[seq].end(), [n](const RowSpan & s) { return s.first < n; });
}

void RowSpans::truncate(int32_t seq, int32_t n_keep) {
    std::vector<RowSpan> & v = seqs_[seq];
    while (!v.empty() && v.back().first >= n_keep) v.pop_back();
    // a 1-D image cut through keeps its first rows (nothing of its positions changes)
    if (!v.empty() && v.back().first + v.back().n > n_keep) v.back().n = n_keep - v.back().first;
}

void RowSpans::copy(int32_t src, int32_t dst, int32_t n) {
    if (src == dst) {
        truncate(dst, n);
        return;
    }
    seqs_[dst] = seqs_[src];
    truncate(dst, n);
}

void RowSpans::clear() {
    for (auto & v : seqs_) v.clear();
}

}  // namespace psl
