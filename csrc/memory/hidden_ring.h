// The MTP drafter's memory of the target (engine/mtp.h): the target's last hidden state (after
// the final norm) at each of its recent positions, which a draft step pairs with the next
// token. A ring of n_rows rows: row p % n_rows holds position p, for p in [lo, hi). Truncating
// the target needs nothing here: a row is read at n_past - 1 only, and rows past the cache are
// replaced by the next batch. At least as deep as the recurrent ring, so that a truncation the
// ring serves in O(1) always finds its row.
#pragma once

#include <cstdint>
#include <vector>

namespace psl {

class HiddenRing {
public:
    HiddenRing(int32_t n_embd, int32_t n_rows);

    // The row of position pos; zeros when it is not kept (llama.cpp starts from zeros too).
    const float * at(int32_t pos) const;
    // Of a batch of n positions, the last kept(n) are stored (only n_rows fit).
    int32_t kept(int32_t n) const { return n < n_rows_ ? n : n_rows_; }
    // The target computed positions n_past .. n_past + n - 1; rows holds the hidden states of the
    // last kept(n) of them, n_embd floats each. Positions from n_past on that were stored before
    // are replaced; with a gap before n_past, nothing older is known any more.
    void store(int32_t n_past, int32_t n, const float * rows);
    void clear() { lo_ = hi_ = 0; }
    // The positions whose rows are kept: [lo, hi).
    int32_t lo() const { return lo_; }
    int32_t hi() const { return hi_; }

private:
    int32_t n_embd_, n_rows_;
    std::vector<float> rows_, zeros_;
    int32_t lo_ = 0, hi_ = 0;
};

}  // namespace psl
