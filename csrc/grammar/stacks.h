// The pushdown side of a grammar: llama.cpp's matching (a set of stacks of grammar positions,
// each stack advanced until its top is a terminal: a character class, a token, or nothing left)
// with every stack and every set of stacks interned, so that a state is one integer and the
// move from a state on a character is computed once and then looked up. That memo is what makes
// a mask cheap: the trie walk (grammar.cpp) asks "this state, then this character" for each of
// its nodes, and inside a JSON string the answers repeat from node to node.
#pragma once

#include "grammar/gbnf.h"
#include "grammar/token_table.h"

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

namespace psl {

class Stacks {
public:
    static constexpr uint32_t EMPTY_STACK = 0;   // the stack with nothing left: the grammar may end
    static constexpr uint32_t NO_SET = 0;        // the empty set: nothing matches

    // Fails (PSL_ERR_INVALID_ARGUMENT naming the limit) where the first state passes limits, or
    // past its time (PSL_ERR_INTERRUPTED on a cancel); at run time the size limits still hold.
    Stacks(const Gbnf & g, uint32_t root, const GrammarLimits & limits);

    // The set the grammar starts in (the root's alternatives, advanced).
    uint32_t initial() const { return initial_; }

    struct Set {
        std::vector<uint32_t> stacks;    // sorted stack ids, each EMPTY_STACK or with a terminal on top
        bool may_end = false;            // holds EMPTY_STACK
        bool has_token_top = false;      // some top is a token element
        uint32_t chars_only = NO_SET;    // the same set without the stacks a character cannot extend
    };
    const Set & set(uint32_t id) const { return sets_[id]; }

    // The set after one code point (only stacks with a character class on top take part).
    uint32_t after_char(uint32_t set, uint32_t cp);
    // The set after a token id, through the stacks with a token element on top.
    uint32_t after_token(uint32_t set, int32_t token);
    // The stacks with a character class on top (what a token's characters may extend).
    uint32_t char_part(uint32_t set);
    uint32_t unite(uint32_t a, uint32_t b);

    const GElem & top(uint32_t stack) const { return elems_[nodes_[stack].pos]; }
    uint32_t top_pos(uint32_t stack) const { return nodes_[stack].pos; }
    bool is_char_top(uint32_t stack) const;
    bool is_token_top(uint32_t stack) const;
    bool match_char(uint32_t pos, uint32_t cp) const;
    bool match_partial(uint32_t pos, Utf8Partial p) const;
    static bool match_token(const GElem & e, int32_t token) {
        return e.type == GType::TOKEN ? e.value == (uint32_t) token : e.value != (uint32_t) token;
    }
    // The one code point the class at pos admits, or UINT32_MAX if it admits another.
    uint32_t single_char(uint32_t pos) const;

    // Drops the memo of moves when it grows past a bound (a long generation's states differ).
    void trim();
    // At run time each operation (a mask, an accept) gets the compile's time limit of its own:
    // a grammar whose states multiply only later fails there instead of pinning its thread.
    void begin_op();
    void end_op() { deadline_ns_ = 0; }
    uint32_t n_stacks() const { return (uint32_t) nodes_.size(); }

private:
    struct Node {
        uint32_t pos;      // a position in elems_
        uint32_t parent;   // the stack below it
    };
    std::vector<GElem> elems_;               // the rules, flattened
    std::vector<uint32_t> rule_start_;
    std::vector<uint32_t> after_;            // by position of a terminal: the position after it
    std::vector<Node> nodes_;                // stack id -> (top, parent); id 0: EMPTY_STACK
    std::unordered_map<uint64_t, uint32_t> node_index_;
    std::vector<std::vector<uint32_t>> advanced_;   // stack id -> terminal stacks (memo; empty: not yet)
    std::vector<std::vector<uint32_t>> succ_;       // terminal stack id -> stacks after its terminal (memo)
    std::vector<uint8_t> succ_done_;
    std::vector<Set> sets_;
    std::map<std::vector<uint32_t>, uint32_t> set_index_;
    std::unordered_map<uint64_t, uint32_t> moves_;  // (set, code point) -> set
    uint32_t initial_ = NO_SET;
    GrammarLimits limits_;
    uint64_t set_storage_ = 0;                      // stack ids held by sets_
    int64_t deadline_ns_ = 0;                       // while compiling (0: none)
    uint32_t ticks_ = 0;

    void tick();
    uint32_t push(uint32_t parent, uint32_t pos);
    bool end_of_seq(uint32_t pos) const { return elems_[pos].type == GType::END || elems_[pos].type == GType::ALT; }
    const std::vector<uint32_t> & advance(uint32_t stack);
    const std::vector<uint32_t> & successors(uint32_t stack);
    uint32_t intern(std::vector<uint32_t> stacks);
};

}  // namespace psl
