// The sampler's state, shared by sampling.cpp (one row, a chain's verification) and
// sampling_tree.cpp (a token tree's verification). Nothing here crosses the public API: the
// handle is opaque to callers (pyllamaspec.h).
#pragma once

#include "grammar/grammar.h"
#include "pyllamaspec.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace psl::sampling {

// xoshiro256** seeded through splitmix64: the same stream on every platform and compiler
// (std:: distributions are not specified bit for bit).
struct Rng {
    uint64_t s[4];
    void seed(uint64_t x) {
        for (uint64_t & v : s) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            v = z ^ (z >> 31);
        }
    }
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
    uint64_t next() {
        const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
        return r;
    }
    double uniform() { return (double) (next() >> 11) * 0x1.0p-53; }   // [0, 1)
};

// llama.cpp's penalties sampler: over the last `last_n` tokens of the history, a token seen
// c > 0 times has its logit divided by `repeat` (multiplied when <= 0, so that a penalty never
// makes a token likelier), then lowered by c * freq + present. Applied to a copy of the row:
// the caller's logits stay raw (logprobs read them).
struct Penalties {
    int32_t last_n = 0;
    float repeat = 1.0f, freq = 0.0f, present = 0.0f;
    std::vector<int32_t> history;   // every token pushed; the window is its tail
    std::vector<int32_t> count;     // scratch per id, all zero between calls
    std::vector<float> row;         // the penalized copy

    bool active() const { return last_n != 0 && (repeat != 1.0f || freq != 0.0f || present != 0.0f); }
    const float * apply(const float * logits, int32_t V);
};

// Rolls a grammar back to where a verification found it, whichever way it returns.
struct GrammarMark {
    psl_grammar * g;
    int32_t n;
    explicit GrammarMark(psl_grammar * gr) : g(gr), n(gr ? gr->n_accepted() : 0) {}
    ~GrammarMark() {
        if (!g) return;
        try {
            g->rewind(g->n_accepted() - n);
        } catch (...) {   // cannot happen (rewinding what it accepted); a destructor must not throw
        }
    }
};

// Restores the history's length when a verification returns, whichever way it does.
struct HistoryMark {
    std::vector<int32_t> & h;
    size_t n;
    explicit HistoryMark(std::vector<int32_t> & v) : h(v), n(v.size()) {}
    ~HistoryMark() { h.resize(n); }
};

// A token tree's acceptance (psl_sampler_verify_tree, sampling_tree.cpp); fails (psl::fail) on a
// malformed tree.
void verify_tree(psl_sampler & s, const float * target_logits, const int32_t * tokens, const int32_t * parents,
                 const float * draft_probs, int32_t n, int32_t * path, int32_t * n_path, int32_t * next_token);

}  // namespace psl::sampling

struct psl_sampler {
    int32_t n_vocab;
    psl_sampling_params params;
    psl::sampling::Rng rng;
    std::vector<int32_t> cand;    // kept candidate ids
    std::vector<float> cand_p;    // their probabilities (sum 1)
    std::vector<float> row_p;     // a dense p row (verify)
    psl::sampling::Penalties pen;
    psl_grammar * grammar = nullptr;   // the constraint, if any (not owned)
    std::vector<uint8_t> allowed;      // its mask
    std::vector<float> masked;         // a row with the tokens it forbids at -inf
    std::vector<int32_t> top;          // the likeliest ids of a row (greedy under a grammar)
    // a tree's verification (sampling_tree.cpp): its children lists, and p and q on the
    // candidates of one node's row
    std::vector<int32_t> kid_start, kids;
    std::vector<double> tree_p, tree_r, tree_q;

    bool greedy() const { return params.temperature <= 0.0f; }

    const uint8_t * grammar_mask();
    int32_t pick_greedy(const float * row);
    const float * constrain(const float * row);
    void adjust(const float * logits);
    void write_dense(float * probs) const;
    int32_t draw_adjusted(const float * row);
    bool accept(const float * row, int32_t x, const float * q, int32_t * next);
    int32_t draw(const float * w, const int32_t * ids, size_t n);
};
