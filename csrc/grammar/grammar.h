// A grammar being followed by one generation: its state (a set of parser stacks and a UTF-8
// character cut at the last token's end), the states before each accepted token (so that a
// rejected draft rolls the grammar back with the caches), and the questions the sampler and the
// speculative round ask: which tokens may come next (a mask, or one token), which bytes every
// continuation starts with (forced text, drafted for free).
//
// Which tokens are allowed is llama.cpp's rule (llama-grammar.cpp), to the token: an
// end-of-generation token where some stack is empty (the grammar may end), any other token whose
// text (special tokens rendered) the stacks can match character by character, the last
// character possibly cut short, or whose id a token element on top names.
#pragma once

#include "grammar/gbnf.h"
#include "grammar/stacks.h"
#include "grammar/token_table.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace psl {

class Grammar {
public:
    // tokens: the vocabulary's table; null for a grammar that is only checked (no state queries).
    Grammar(const Gbnf & g, uint32_t root, std::shared_ptr<const TokenTable> tokens, const GrammarLimits & limits);

    bool allows(int32_t token);
    // out[id] = 1 where the token is allowed now, for ids < n (ids past the vocabulary: 0).
    void mask(uint8_t * out, int32_t n);
    // Takes a token the grammar allows (false, and no change, for one it does not).
    bool accept(int32_t token);
    // Back to the state before the last n accepted tokens.
    void rewind(int32_t n);
    int32_t n_accepted() const { return (int32_t) history_.size(); }
    // The grammar is complete here: an end-of-generation token is allowed.
    bool may_end() const { return stacks_.set(state_.set).may_end; }
    // No token of the vocabulary continues the text here (a grammar whose language the
    // vocabulary cannot spell, or a dead end after some tokens): the mask then allows the
    // end-of-generation tokens, so that a generation ends instead of failing.
    bool dead_end();
    // Why the grammar stopped at run time (a limit passed in a mask or an accept), else empty.
    // It then stands at a dead end: the generation ends there, and its caller says why.
    const std::string & failure() const { return failure_; }
    // Whether it holds many parser stacks (its memory is worth giving back when it goes).
    bool large() const { return stacks_.n_stacks() > (1u << 14); }
    // The text every continuation starts with, up to max_bytes (whole characters): empty where
    // the grammar branches, may end, or expects a token element.
    std::string forced(size_t max_bytes);

private:
    struct State {
        uint32_t set;
        Utf8Partial partial;
        bool operator==(const State & o) const { return set == o.set && partial == o.partial; }
    };
    Stacks stacks_;
    std::shared_ptr<const TokenTable> tokens_;
    State state_;
    std::vector<State> history_;
    std::vector<uint32_t> scratch_;
    // the last masks computed, by state (a JSON string's inside recurs token after token)
    struct Cached {
        State state;
        std::vector<uint8_t> mask;
        bool dead_end = false;
    };
    std::vector<Cached> cache_;
    std::string failure_;

    // Runs a step on the stacks with the run-time bounds: a limit passed marks the grammar failed.
    template <typename F> auto bounded(F && step, decltype(step()) if_failed) -> decltype(step());
    bool failed() const { return !failure_.empty(); }

    const TokenTable & table() const;
    bool allows_from(State st, int32_t token);
    bool ends_ok(uint32_t set, Utf8Partial tail);
    void walk(uint32_t node, uint32_t set, uint8_t * out);
    void compute_mask(uint8_t * out);
    const Cached & cached_mask();
    std::string forced_from_state(size_t max_bytes);
};

}  // namespace psl

// The C API's handle (pyllamaspec.h) is the grammar itself.
struct psl_grammar : psl::Grammar {
    using psl::Grammar::Grammar;
};
