#include "memory/kv_cells.h"

#include <algorithm>

namespace psl {

KvCells::KvCells(int32_t n_cells, int32_t n_seq)
    : pos_((size_t) n_cells, -1), refs_((size_t) n_cells, 0), seqs_((size_t) n_seq), scratch_((size_t) n_seq) {}

int32_t KvCells::used_end() const {
    while (end_ > 0 && refs_[end_ - 1] == 0) --end_;
    return end_;
}

int32_t KvCells::cell_at(int32_t seq, int32_t pos) const {
    const auto & own = seqs_[seq];
    return pos < (int32_t) own.size() ? own[pos] : -1;
}

int32_t KvCells::find_free(int32_t seq) const {
    if (n_used_ == size()) return -1;
    const auto & own = seqs_[seq];
    const int32_t off = (int32_t) own.size() % PAGE;
    const int32_t from = own.empty() ? 0 : own.back() + 1;
    if (!own.empty() && from < size() && from % PAGE == off && refs_[from] == 0) return from;
    for (int32_t page = from / PAGE * PAGE; page + off < size(); page += PAGE) {
        const int32_t c = page + off;
        if (c >= from && free_from(c, std::min(page + PAGE, size()))) return c;
    }
    return next_free(seq);
}

bool KvCells::free_from(int32_t cell, int32_t end) const {
    for (int32_t c = cell; c < end; ++c) {
        if (refs_[c] != 0) return false;
    }
    return true;
}

int32_t KvCells::next_free(int32_t seq) const {
    if (n_used_ == size()) return -1;
    const auto & own = seqs_[seq];
    const int32_t from = own.empty() ? 0 : own.back() + 1;
    for (int32_t c = from; c < size(); ++c) {
        if (refs_[c] == 0) return c;
    }
    while (lo_ < from && refs_[lo_] != 0) ++lo_;   // every cell below lo_ is in use
    return lo_ < from ? lo_ : -1;
}

void KvCells::take(int32_t cell, int32_t pos) {
    if (refs_[cell]++ == 0) {
        ++n_used_;
        pos_[cell] = pos;
        end_ = std::max(end_, cell + 1);
    }
}

void KvCells::release(int32_t cell) {
    if (--refs_[cell] == 0) {
        --n_used_;
        pos_[cell] = -1;
        lo_ = std::min(lo_, cell);
    }
}

void KvCells::append(int32_t cell, const int32_t * seqs, int32_t n) {
    for (int32_t i = 0; i < n; ++i) {
        take(cell, (int32_t) seqs_[seqs[i]].size());
        seqs_[seqs[i]].push_back(cell);
    }
}

void KvCells::truncate(int32_t seq, int32_t n_keep) {
    drop_scratch(seq);
    auto & own = seqs_[seq];
    for (size_t p = (size_t) n_keep; p < own.size(); ++p) release(own[p]);
    if ((size_t) n_keep < own.size()) own.resize((size_t) n_keep);
}

void KvCells::copy(int32_t src, int32_t dst, int32_t n) {
    if (src == dst) {
        truncate(dst, n);
        return;
    }
    truncate(dst, 0);
    drop_scratch(src);
    const auto & from = seqs_[src];
    for (int32_t p = 0; p < n; ++p) take(from[p], p);
    seqs_[dst].assign(from.begin(), from.begin() + n);
}

std::vector<int32_t> KvCells::compact() {
    std::vector<int32_t> to((size_t) size(), -1);
    int32_t n = 0;
    for (int32_t c = 0; c < size(); ++c) {     // n <= c: entries below c were read already
        if (refs_[c] == 0) continue;
        to[c] = n, pos_[n] = pos_[c], refs_[n] = refs_[c];
        ++n;
    }
    std::fill(pos_.begin() + n, pos_.end(), -1);
    std::fill(refs_.begin() + n, refs_.end(), 0);
    for (auto & own : seqs_) {
        for (int32_t & c : own) c = to[c];
    }
    for (auto & own : scratch_) {
        for (int32_t & c : own) c = to[c];
    }
    end_ = lo_ = n;
    return to;
}

void KvCells::clear() {
    std::fill(pos_.begin(), pos_.end(), -1);
    std::fill(refs_.begin(), refs_.end(), 0);
    for (auto & s : seqs_) s.clear();
    for (auto & s : scratch_) s.clear();
    n_used_ = 0;
    end_ = 0;
    lo_ = 0;
}

int32_t KvCells::add_scratch(int32_t seq, int32_t pos) {
    const int32_t c = next_free(seq);
    if (c < 0) return -1;
    take(c, pos);
    scratch_[seq].push_back(c);
    return c;
}

void KvCells::drop_scratch(int32_t seq) {
    for (int32_t c : scratch_[seq]) release(c);
    scratch_[seq].clear();
}

void KvCells::drop_all_scratch() {
    for (int32_t s = 0; s < n_seq(); ++s) drop_scratch(s);
}

}  // namespace psl
