// The priority queue of the merge loops of both tokenizers (vocab_bpe.cpp, vocab_spm.cpp): holds
// (rank, pos) entries and pops the lowest rank first, ties the lowest position (BPE: merge rank;
// SPM: rank of the score, highest score first). Stale entries are the caller's to skip.
//
// A word of a few hundred symbols uses a binary heap, which lives in L1. A long word (a megabyte
// of one letter is one word) would make that heap tens of megabytes, and each pop would pay
// log2(n) cache misses: 10 MB of 'a' took seconds. Long words use buckets instead, one per rank
// that has entries: a bucket is sorted once when its rank comes up (entries mostly arrive in
// position order already) and then read front to back; a small heap holds the ranks that have
// buckets. Entries that arrive in a bucket being read, behind its read position, go to a heap
// of that bucket (BPE never does this: a pair is never made again once its merge has run, the
// new symbols being longer; SPM does when tokens share a score). Every step is O(1) or a
// logarithmic step on a small heap; the worst case stays O(n log n).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace psl {

class MergeQueue {
public:
    // Words of at least this many symbols use the buckets.
    static constexpr size_t kBucketMin = 512;

    // Empties the queue for a word of n_symbols symbols.
    void reset(size_t n_symbols);
    void push(uint32_t rank, uint32_t pos);
    // The entry of lowest (rank, pos); false when empty.
    bool pop(uint32_t & rank, uint32_t & pos);

private:
    struct Bucket {
        std::vector<uint32_t> run;    // positions; sorted from run[head] on once open
        std::vector<uint32_t> late;   // min-heap: positions that arrived behind the order of run
        size_t head = 0;
        bool open = false;
    };
    bool pop_bucket(uint32_t & rank, uint32_t & pos);
    void release(uint32_t rank);

    bool use_buckets_ = false;
    std::vector<uint64_t> heap_;          // small words: (rank << 32 | pos), a min-heap
    std::vector<int32_t> slot_of_rank_;   // buckets: rank -> index into slots_, -1 if none
    std::vector<Bucket> slots_;
    std::vector<int32_t> free_slots_;
    std::vector<uint32_t> ranks_;         // min-heap of the ranks that have a bucket
};

}  // namespace psl
