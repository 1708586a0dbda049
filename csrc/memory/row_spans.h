// Where a sequence's images (psl_context_seq_eval_rows) lie among its tokens, and the M-RoPE
// positions they change. A cell's position stays the token's index in its sequence (masks,
// truncation, copies and state files see tokens only); an image placed 2-D, as llama.cpp's mtmd
// places one for a Qwen-VL text model, gives row i of an nx x ny grid starting at rope position
// p0 the positions (p0, p0 + i / nx, p0 + i % nx, 0), and the tokens after it start at
// p0 + max(nx, ny): each such image saves n - max(nx, ny) positions for what follows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psl {

struct RowSpan {
    int32_t first = 0, n = 0;   // the rows' token indices: first .. first + n - 1
    int32_t nx = 0, ny = 0;     // the grid; 0 x 0: one position a row (nothing changes)
    bool grid() const { return nx > 0; }
};

class RowSpans {
public:
    explicit RowSpans(int32_t n_seq) : seqs_((size_t) n_seq) {}
    void add(int32_t seq, const RowSpan & s) { seqs_[seq].push_back(s); }
    const std::vector<RowSpan> & of(int32_t seq) const { return seqs_[seq]; }
    bool any(int32_t seq) const { return !seqs_[seq].empty(); }
    // the 4 M-RoPE positions (section-major order t, y, x, e) of seq's token at index p
    void rope_pos(int32_t seq, int32_t p, int32_t out[4]) const;
    // the rope position the token at index p takes (its t section)
    int32_t rope_t(int32_t seq, int32_t p) const;
    // n_keep falls strictly inside one of seq's images placed 2-D
    bool cuts(int32_t seq, int32_t n_keep) const;
    // one of seq's images starts below index n
    bool any_below(int32_t seq, int32_t n) const;
    void truncate(int32_t seq, int32_t n_keep);   // drops the images from n_keep on
    void copy(int32_t src, int32_t dst, int32_t n);
    void set(int32_t seq, std::vector<RowSpan> spans) { seqs_[seq] = std::move(spans); }
    void clear();

private:
    std::vector<std::vector<RowSpan>> seqs_;
};

}  // namespace psl
