#include "engine/batch.h"

#include "error.h"
#include "memory/memory.h"

#include <algorithm>

namespace psl {

namespace {

int32_t n_seq_of_given(const psl_batch & b, int32_t i) { return b.n_seq_id ? b.n_seq_id[i] : 1; }

// The sequences of token i as given (one, sequence 0, when the batch names none).
void check_seqs(const psl_batch & b, int32_t i, int64_t off, int32_t n_seq, std::vector<int32_t> & out) {
    const int32_t k = b.n_seq_id ? b.n_seq_id[i] : 1;
    if (k < 1 || k > n_seq) {
        fail(PSL_ERR_INVALID_ARGUMENT, "token %d belongs to %d sequences (1 to %d, the context's n_seq_max)", i, k,
             n_seq);
    }
    for (int32_t j = 0; j < k; ++j) {
        const int32_t s = b.seq_id ? b.seq_id[off + j] : 0;
        if (s < 0 || s >= n_seq) {
            fail(PSL_ERR_OUT_OF_RANGE, "token %d: sequence id %d is outside [0, %d) (the context's n_seq_max)", i, s,
                 n_seq);
        }
        for (int32_t q = 0; q < j; ++q) {
            if (out[out.size() - j + q] == s) fail(PSL_ERR_INVALID_ARGUMENT, "token %d names sequence %d twice", i, s);
        }
        out.push_back(s);
    }
}

}  // namespace

Batch::Batch(const psl_batch & b, const Memory & mem, int32_t n_vocab, int32_t n_ctx, bool hybrid) : n(b.n_tokens) {
    if (n < 0) fail(PSL_ERR_INVALID_ARGUMENT, "number of tokens must be >= 0 (got %d)", n);
    if (n > 0 && !b.tokens) fail(PSL_ERR_INVALID_ARGUMENT, "tokens is NULL");
    if (b.n_seq_id && !b.seq_id) fail(PSL_ERR_INVALID_ARGUMENT, "n_seq_id is given without seq_id");
    const int32_t n_seq = mem.n_seq();
    std::vector<int32_t> next((size_t) n_seq, -1);   // each sequence's next position, once seen
    tokens.assign(b.tokens, b.tokens + n);
    pos.resize(n);
    out_row.assign(n, -1);
    seq_begin.push_back(0);
    for (int32_t i = 0; i < n; ++i) {
        if (tokens[i] < 0 || tokens[i] >= n_vocab) {
            fail(PSL_ERR_OUT_OF_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", tokens[i], i, n_vocab);
        }
    }
    int64_t off = 0;
    for (int32_t i = 0; i < n; ++i) {
        check_seqs(b, i, off, n_seq, seqs);
        off += n_seq_of_given(b, i);
        seq_begin.push_back((int32_t) seqs.size());
        if (hybrid && n_seq_of(i) > 1) {
            fail(PSL_ERR_UNSUPPORTED, "token %d belongs to %d sequences: a hybrid model's recurrent state (or an "
                 "MTP block's hidden rows) takes one", i,
                 n_seq_of(i));
        }
        for (int32_t j = 0; j < n_seq_of(i); ++j) {
            const int32_t s = seqs_of(i)[j];
            if (next[s] < 0) next[s] = mem.n_past(s);
        }
        const int32_t p = b.pos ? b.pos[i] : next[seq(i)];
        for (int32_t j = 0; j < n_seq_of(i); ++j) {
            const int32_t s = seqs_of(i)[j];
            if (p != next[s]) {
                fail(PSL_ERR_INVALID_ARGUMENT, "token %d is at position %d of sequence %d, which continues at %d "
                     "(each sequence's positions follow on)", i, p, s, next[s]);
            }
            ++next[s];
        }
        pos[i] = p;
        if (!b.logits || b.logits[i]) out_row[i] = n_out++;
    }
    for (int32_t s = 0; s < n_seq; ++s) {
        if (next[s] > n_ctx) {
            fail(PSL_ERR_CONTEXT_FULL, "context full: %d tokens in the cache + %d new exceed n_ctx = %d%s",
                 mem.n_past(s), next[s] - mem.n_past(s), n_ctx, s ? " (in one sequence)" : "");
        }
    }
}

Batch Batch::replay(int32_t seq, const int32_t * toks, int32_t n_tokens) {
    Batch b;
    b.n = n_tokens;
    b.tokens.assign(toks, toks + n_tokens);
    b.pos.resize(n_tokens);
    for (int32_t i = 0; i < n_tokens; ++i) b.pos[i] = i;
    b.seqs.assign(n_tokens, seq);
    b.seq_begin.resize(n_tokens + 1);
    for (int32_t i = 0; i <= n_tokens; ++i) b.seq_begin[i] = i;
    b.out_row.assign(n_tokens, -1);
    return b;
}

std::vector<int32_t> Batch::seq_ids() const {
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < n; ++i) {
        for (int32_t j = 0; j < n_seq_of(i); ++j) {
            if (std::find(ids.begin(), ids.end(), seqs_of(i)[j]) == ids.end()) ids.push_back(seqs_of(i)[j]);
        }
    }
    return ids;
}

std::vector<std::vector<int32_t>> Batch::split(int32_t n_batch, bool by_seq) const {
    std::vector<std::vector<int32_t>> out;
    auto add = [&](const std::vector<int32_t> & idx) {
        for (size_t off = 0; off < idx.size(); off += (size_t) n_batch) {
            out.emplace_back(idx.begin() + off, idx.begin() + std::min(idx.size(), off + (size_t) n_batch));
        }
    };
    if (!by_seq) {
        std::vector<int32_t> all(n);
        for (int32_t i = 0; i < n; ++i) all[i] = i;
        add(all);
        return out;
    }
    for (int32_t s : seq_ids()) {
        std::vector<int32_t> idx;
        for (int32_t i = 0; i < n; ++i) {
            if (seq(i) == s) idx.push_back(i);
        }
        add(idx);
    }
    return out;
}

}  // namespace psl
