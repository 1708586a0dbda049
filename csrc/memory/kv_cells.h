// Which sequences hold each KV cell, and at which position (llama.cpp's seq_id / pos per cell).
// A sequence holds positions 0 .. n_past - 1, one cell each (a batch appends consecutive
// positions, truncation drops a tail, a copy shares a prefix): seq_cells[s][p] is the cell of
// position p. A cell held by several sequences (a shared prompt prefix, a tree node on several
// branches) is freed when the last of them lets go.
//
// Scratch cells: an MTP draft node writes the K/V of its draft token past a sequence's end (a
// draft tree may put several at one position); the draft's masks name them (engine/mtp.cpp),
// and they are dropped before anything else changes the sequence.
#pragma once

#include <cstdint>
#include <vector>

namespace psl {

class KvCells {
public:
    KvCells(int32_t n_cells, int32_t n_seq);

    int32_t size() const { return (int32_t) refs_.size(); }
    int32_t n_seq() const { return (int32_t) seqs_.size(); }
    int32_t n_used() const { return n_used_; }
    int32_t n_free() const { return size() - n_used_; }
    // One past the highest cell in use: what an attention must read.
    int32_t used_end() const;

    int32_t n_past(int32_t seq) const { return (int32_t) seqs_[seq].size(); }
    // The cell of position pos < n_past of seq.
    int32_t cell_at(int32_t seq, int32_t pos) const;
    int32_t pos_of(int32_t cell) const { return pos_[cell]; }
    bool shared(int32_t cell) const { return refs_[cell] > 1; }

    // A free cell for the next token of seq (position p = n_past): one that sits, as in a cache
    // of its own, at p mod PAGE within a page of PAGE cells, its pages ascending (the cell
    // after its last one, or the first page above whose cells from there on are free); else the
    // first free cell after its last one, else the lowest free one (Memory::free_cell then
    // compacts the cache rather than take it). -1 when none is free.
    // Why: ggml's CPU flash attention reads cells in blocks of 64 (its tiled path, 64 query rows
    // and more) and in order: so placed, a sequence's blocks and order are those it has alone,
    // and its logits do not depend on what else the cache holds.
    int32_t find_free(int32_t seq) const;
    static constexpr int32_t PAGE = 64;   // ggml-cpu's GGML_FA_TILE_KV
    // Cell `cell` (free) becomes position n_past of each of seqs[0..n) (the same in each).
    void append(int32_t cell, const int32_t * seqs, int32_t n);
    // Whether `cell`, as the next cell of seq, would sit below its last one (its attention would
    // then read that token first: find_free's last resort).
    bool below_last(int32_t seq, int32_t cell) const { return !seqs_[seq].empty() && cell < seqs_[seq].back(); }
    // Every cell in use moves down to the lowest cells, keeping their order (so a sequence's
    // cells still ascend); all free cells then lie above every used one. KvCache::compact moves
    // the rows. Returns old cell -> new cell (-1: was free).
    std::vector<int32_t> compact();
    // Keeps the first n_keep positions of seq.
    void truncate(int32_t seq, int32_t n_keep);
    // dst holds src's first n positions (its own cells let go first).
    void copy(int32_t src, int32_t dst, int32_t n);
    void clear();

    int32_t n_scratch(int32_t seq) const { return (int32_t) scratch_[seq].size(); }
    // The scratch cells of seq, in the order they were added.
    const std::vector<int32_t> & scratch(int32_t seq) const { return scratch_[seq]; }
    // A free cell as a scratch cell of seq at position pos >= n_past (-1 when none is free).
    int32_t add_scratch(int32_t seq, int32_t pos);
    void drop_scratch(int32_t seq);
    void drop_all_scratch();

private:
    int32_t next_free(int32_t seq) const;     // the first free after seq's last cell, else the lowest
    bool free_from(int32_t cell, int32_t end) const;
    void release(int32_t cell);
    void take(int32_t cell, int32_t pos);

    std::vector<int32_t> pos_;                  // by cell, -1 when free
    std::vector<int32_t> refs_;                 // by cell: the sequences (or a scratch) holding it
    std::vector<std::vector<int32_t>> seqs_;    // by sequence: the cell of each position
    std::vector<std::vector<int32_t>> scratch_; // by sequence: scratch cells past its end
    int32_t n_used_ = 0;
    mutable int32_t end_ = 0;                   // an upper bound of used_end()
    mutable int32_t lo_ = 0;                    // a lower bound of the lowest free cell
};

}  // namespace psl
