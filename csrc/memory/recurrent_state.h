// The recurrent memory of a hybrid model's linear-attention layers: per layer a short
// convolution state and a Gated DeltaNet state, neither of which grows with the context.
// Rollback must be exact, so each layer keeps a ring of the states after its last K positions
// (row p % K holds the state after position p; row K is the zero state before any token).
// Truncating the cache to n_keep then just picks the row of position n_keep - 1; a truncation
// further back than the ring reaches replays the kept tokens from the start. Each sequence has
// a ring of its own: sequence s owns rows s * (K + 1) .. s * (K + 1) + K.
#pragma once

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <utility>
#include <vector>

struct psl_model;

namespace psl {

// The ring length: 17 (a default 16-token draft plus the verified token roll back without a
// replay); PYLLAMASPEC_RS_SNAPSHOTS overrides it (1..4096), to trade memory for replays.
int32_t recurrent_snapshots();

class RecurrentState {
public:
    // n_snap: ring length K, the deepest rollback that needs no replay is K - 1 tokens; n_seq:
    // the sequences (one ring each).
    RecurrentState(const psl_model & m, int32_t n_snap, int32_t n_seq);
    RecurrentState(const RecurrentState &) = delete;
    RecurrentState & operator=(const RecurrentState &) = delete;

    int32_t n_snap() const { return n_snap_; }
    int32_t n_seq() const { return (int32_t) seqs_.size(); }
    ggml_tensor * conv(int il) const { return conv_[il]; }   // F32 [conv_row, n_seq (K + 1)], time-major rows
    ggml_tensor * ssm(int il) const { return ssm_[il]; }     // F32 [state_row, n_seq (K + 1)]
    // States a batch of n tokens snapshots: those after its last min(n, K) tokens.
    int32_t n_written(int32_t n_tokens) const { return n_tokens < n_snap_ ? n_tokens : n_snap_; }
    size_t bytes() const;

    // Graph inputs of a batch of n_tokens of sequence seq at n_past: the row read (src, I32
    // [1]), the rows written (I64 [n_written]: dst newest first for the DeltaNet op's
    // snapshots, dst_old oldest first for the convolution windows). An input the graph does not
    // use (null, or not allocated) is skipped.
    void fill_inputs(ggml_tensor * src, ggml_tensor * dst, ggml_tensor * dst_old, int32_t seq, int32_t n_past,
                     int32_t n_tokens);
    // Before computing n_tokens of seq at n_past: the rows the batch may overwrite are no longer
    // trusted (also when the computation then fails half way).
    void begin_batch(int32_t seq, int32_t n_past, int32_t n_tokens);
    // After a batch succeeded: its tokens join the sequence's history (the replay source).
    void end_batch(int32_t seq, const int32_t * tokens, int32_t n);
    // The sequence was cut to n_keep tokens: true when its ring holds the state after position
    // n_keep - 1, false when the caller must replay history(seq)[0..n_keep) from the zero state.
    bool rollback(int32_t seq, int32_t n_keep);
    // dst takes src's state after its first n tokens (src's ring holds it: rollback(src, n)
    // would succeed) and its history; false (nothing done) when the ring does not reach.
    bool copy(int32_t src, int32_t dst, int32_t n);
    const std::vector<int32_t> & history(int32_t seq) const { return seqs_[seq].history; }
    // For a sequence's state as bytes (seq_state.cpp): the state tensors (each recurrent
    // layer's conv, then ssm), the oldest position whose state the ring holds, the byte offset
    // in t of the state after position pos, and setting a sequence whose states from position
    // lo on the caller has written.
    std::vector<ggml_tensor *> tensors() const;
    int32_t lo(int32_t seq) const { return seqs_[seq].lo; }
    size_t offset(const ggml_tensor * t, int32_t seq, int32_t pos) const { return (size_t) row(seq, pos) * t->nb[1]; }
    void restore(int32_t seq, std::vector<int32_t> tokens, int32_t lo) { seqs_[seq] = Seq{lo, std::move(tokens)}; }
    void set_history(int32_t seq, std::vector<int32_t> h) { seqs_[seq].history = std::move(h); }

private:
    struct Seq {
        int32_t lo = 0;                        // oldest position whose state is in the ring
        std::vector<int32_t> history;          // the tokens in the cache
    };
    int32_t row(int32_t seq, int32_t pos) const { return seq * (n_snap_ + 1) + pos % n_snap_; }
    int32_t zero_row(int32_t seq) const { return seq * (n_snap_ + 1) + n_snap_; }

    int32_t n_snap_;
    std::vector<Seq> seqs_;
    std::vector<ggml_tensor *> conv_, ssm_;    // null for attention layers
    std::vector<std::pair<ggml_backend_dev_t, ggml_context_ptr>> ctxs_;   // one per device
    std::vector<ggml_backend_buffer_ptr> bufs_;
    std::vector<int64_t> idx_;                 // scratch for the row indices
};

}  // namespace psl
