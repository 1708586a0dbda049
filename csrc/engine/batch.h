// A batch of tokens of several sequences (psl_batch, llama.cpp's llama_batch), checked against
// the memory before any work, and how it is split into the graphs that compute it.
//
// Conventions (llama.cpp's): a token may belong to several sequences (a shared prefix, a tree
// node on several branches); it is stored once, in every one of them, and attends as its first
// sequence: to that sequence's cells at positions <= its own. Each sequence's tokens continue it:
// in batch order their positions are n_past, n_past + 1, ... of that sequence.
#pragma once

#include "pyllamaspec.h"

#include <cstdint>
#include <vector>

namespace psl {

class Memory;

struct Batch {
    Batch() = default;

    int32_t n = 0;
    std::vector<int32_t> tokens, pos;
    std::vector<int32_t> seq_begin;   // token i's sequences: seqs[seq_begin[i] .. seq_begin[i + 1])
    std::vector<int32_t> seqs;
    std::vector<int32_t> out_row;     // the token's row in the logits, -1 for none
    int32_t n_out = 0;

    // Checks b: token ids in [0, n_vocab), sequence ids in [0, n_seq) and distinct per token,
    // positions that continue each sequence and stay below n_ctx; a hybrid model (recurrent
    // state) takes one sequence per token. Throws psl::Error naming the first problem.
    Batch(const psl_batch & b, const Memory & mem, int32_t n_vocab, int32_t n_ctx, bool hybrid);
    // A replay (memory.h): the n kept tokens of seq again, at positions 0 .. n - 1, no logits.
    static Batch replay(int32_t seq, const int32_t * tokens, int32_t n);

    int32_t seq(int32_t i) const { return seqs[seq_begin[i]]; }   // the sequence token i attends as
    int32_t n_seq_of(int32_t i) const { return seq_begin[i + 1] - seq_begin[i]; }
    const int32_t * seqs_of(int32_t i) const { return seqs.data() + seq_begin[i]; }
    // The distinct sequences, in the order they first appear.
    std::vector<int32_t> seq_ids() const;
    // The tokens (indices) of each graph, in the order they are computed: at most n_batch each,
    // in batch order; with by_seq one sequence per graph (a sequence's tokens keep their order).
    std::vector<std::vector<int32_t>> split(int32_t n_batch, bool by_seq) const;
};

}  // namespace psl
