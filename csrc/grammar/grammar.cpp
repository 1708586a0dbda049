// Grammar (grammar.h): allowed tokens, accepting, rolling back, forced text.
#include "grammar/grammar.h"

#include "error.h"

#include <algorithm>
#include <cstring>

namespace psl {

namespace {

constexpr size_t MASK_CACHE = 8;

void put_utf8(uint32_t cp, std::string & out) {
    if (cp < 0x80) {
        out.push_back((char) cp);
    } else if (cp < 0x800) {
        out.push_back((char) (0xC0 | (cp >> 6)));
        out.push_back((char) (0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back((char) (0xE0 | (cp >> 12)));
        out.push_back((char) (0x80 | ((cp >> 6) & 0x3F)));
        out.push_back((char) (0x80 | (cp & 0x3F)));
    } else {
        out.push_back((char) (0xF0 | (cp >> 18)));
        out.push_back((char) (0x80 | ((cp >> 12) & 0x3F)));
        out.push_back((char) (0x80 | ((cp >> 6) & 0x3F)));
        out.push_back((char) (0x80 | (cp & 0x3F)));
    }
}

}  // namespace

Grammar::Grammar(const Gbnf & g, uint32_t root, std::shared_ptr<const TokenTable> tokens, const GrammarLimits & limits)
    : stacks_(g, root, limits), tokens_(std::move(tokens)), state_{stacks_.initial(), Utf8Partial{}} {}

template <typename F> auto Grammar::bounded(F && step, decltype(step()) if_failed) -> decltype(step()) {
    if (failed()) return if_failed;
    stacks_.begin_op();
    try {
        auto out = step();
        stacks_.end_op();
        return out;
    } catch (const Error & e) {     // only the stacks' limits throw here
        stacks_.end_op();
        failure_ = e.what();
        cache_.clear();
        return if_failed;
    }
}

const TokenTable & Grammar::table() const {
    if (!tokens_) fail(PSL_ERR_INVALID_ARGUMENT, "grammar: made without a vocabulary (a syntax check only)");
    return *tokens_;
}

// A token's text ended in this set: fine unless it ends inside a character, which some stack
// with a character class on top must be able to complete.
bool Grammar::ends_ok(uint32_t set, Utf8Partial tail) {
    if (tail.n_remain == 0) return true;
    for (uint32_t s : stacks_.set(set).stacks) {
        if (stacks_.is_char_top(s) && stacks_.match_partial(stacks_.top_pos(s), tail)) return true;
    }
    return false;
}

bool Grammar::allows_from(State st, int32_t token) {
    const TokenTable & t = table();
    if (token < 0 || token >= t.n_tokens) return false;
    const uint8_t kind = t.kind[(size_t) token];
    if (kind == TokenTable::EOG) return stacks_.set(st.set).may_end;
    if (kind != TokenTable::TEXT) return false;
    const uint32_t * cps;
    size_t n;
    Utf8Partial tail;
    if (st.partial.n_remain == 0) {
        cps = t.cps.data() + t.cp_off[(size_t) token];
        n = t.cp_off[(size_t) token + 1] - t.cp_off[(size_t) token];
        tail = t.tail[(size_t) token];
    } else {
        decode_piece(t.piece(token), st.partial, scratch_, tail);
        cps = scratch_.data();
        n = scratch_.size();
    }
    if (tail.n_remain < 0) return false;
    uint32_t set = st.set;
    for (size_t i = 0; i < n; ++i) {
        // a token element on top takes the token by its id (llama.cpp asks this at any
        // character of the token, not only its first)
        if (stacks_.set(set).has_token_top) {
            for (uint32_t s : stacks_.set(set).stacks) {
                if (stacks_.is_token_top(s) && Stacks::match_token(stacks_.top(s), token)) return true;
            }
        }
        set = stacks_.after_char(set, cps[i]);
        if (set == Stacks::NO_SET) return false;
    }
    return ends_ok(set, tail);
}

bool Grammar::allows(int32_t token) {
    const TokenTable & t = table();
    const bool eog = token >= 0 && token < t.n_tokens && t.kind[(size_t) token] == TokenTable::EOG;
    if (bounded([&] { return allows_from(state_, token); }, false)) return true;
    return eog && dead_end();      // at a dead end the mask allows the end-of-generation tokens
}

bool Grammar::accept(int32_t token) {
    if (!allows(token)) return false;
    const TokenTable & t = table();
    if (failed()) {                 // only an end-of-generation token gets here
        history_.push_back(state_);
        return true;
    }
    if (t.kind[(size_t) token] == TokenTable::EOG) {   // the grammar has ended; the state stays
        history_.push_back(state_);
        return true;
    }
    std::vector<uint32_t> cps;
    Utf8Partial tail;
    decode_piece(t.piece(token), state_.partial, cps, tail);
    // llama.cpp's accept: token elements take the id; character classes take the characters
    // (a stack that meets a token element halfway through them is dropped)
    const uint32_t next = bounded([&] {
        const uint32_t by_id = stacks_.after_token(state_.set, token);
        uint32_t by_chars = stacks_.char_part(state_.set);
        for (size_t i = 0; i < cps.size() && by_chars != Stacks::NO_SET; ++i) by_chars = stacks_.after_char(by_chars, cps[i]);
        return stacks_.unite(by_id, by_chars);
    }, Stacks::NO_SET);
    if (next == Stacks::NO_SET) return false;
    history_.push_back(state_);
    state_ = State{next, tail};
    return true;
}

void Grammar::rewind(int32_t n) {
    if (n < 0 || (size_t) n > history_.size()) {
        fail(PSL_ERR_OUT_OF_RANGE, "grammar: cannot rewind %d tokens (%zu accepted)", n, history_.size());
    }
    if (n == 0) return;
    state_ = history_[history_.size() - (size_t) n];
    history_.resize(history_.size() - (size_t) n);
}

const Grammar::Cached & Grammar::cached_mask() {
    const TokenTable & t = table();
    auto hit = std::find_if(cache_.begin(), cache_.end(), [&](const Cached & c) { return c.state == state_; });
    if (hit != cache_.end()) return *hit;
    if (cache_.size() == MASK_CACHE) cache_.erase(cache_.begin());
    Cached c{state_, std::vector<uint8_t>((size_t) t.n_tokens, 0)};
    if (!bounded([&] { compute_mask(c.mask.data()); return true; }, false)) std::fill(c.mask.begin(), c.mask.end(), 0);
    if (std::find(c.mask.begin(), c.mask.end(), 1) == c.mask.end()) {
        c.dead_end = true;
        for (int32_t id : t.eog) c.mask[(size_t) id] = 1;
    }
    cache_.push_back(std::move(c));
    return cache_.back();
}

void Grammar::mask(uint8_t * out, int32_t n) {
    const size_t m = (size_t) std::min(n, table().n_tokens);
    std::memset(out, 0, (size_t) std::max(n, 0));
    std::memcpy(out, cached_mask().mask.data(), m);
}

bool Grammar::dead_end() { return cached_mask().dead_end; }

void Grammar::compute_mask(uint8_t * out) {
    const TokenTable & t = table();
    stacks_.trim();
    if (state_.partial.n_remain != 0) {   // inside a character: each token continues it differently
        for (int32_t id = 0; id < t.n_tokens; ++id) out[id] = allows_from(state_, id) ? 1 : 0;
        return;
    }
    walk(0, state_.set, out);
    if (stacks_.set(state_.set).may_end) {
        for (int32_t id : t.eog) out[id] = 1;
    }
}

// One trie node reached in `set`: the tokens ending here are allowed (if cut inside a
// character, where a class can complete it), token elements on top allow the tokens that go on
// past here by id, and each child is visited in the set its code point leads to, if any.
void Grammar::walk(uint32_t node, uint32_t set, uint8_t * out) {
    const TokenTable & t = *tokens_;
    const TokenTable::Node & nd = t.nodes[node];
    for (uint32_t i = nd.tok_lo; i < nd.tok_mid; ++i) {
        const int32_t id = t.sorted[i];
        if (ends_ok(set, t.tail[(size_t) id])) out[id] = 1;
    }
    if (stacks_.set(set).has_token_top) {
        const std::vector<uint32_t> tops = stacks_.set(set).stacks;
        for (uint32_t s : tops) {
            if (!stacks_.is_token_top(s)) continue;
            const GElem e = stacks_.top(s);
            if (e.type == GType::TOKEN) {
                const int32_t r = e.value < (uint32_t) t.n_tokens ? t.rank[e.value] : -1;
                if (r >= (int32_t) nd.tok_mid && r < (int32_t) nd.tok_hi) out[e.value] = 1;
            } else {
                for (uint32_t i = nd.tok_mid; i < nd.tok_hi; ++i) {
                    if ((uint32_t) t.sorted[i] != e.value) out[t.sorted[i]] = 1;
                }
            }
        }
    }
    for (uint32_t c = node + 1; c < nd.end; c = t.nodes[c].end) {
        const uint32_t next = stacks_.after_char(set, t.nodes[c].cp);
        if (next != Stacks::NO_SET) walk(c, next, out);
    }
}

std::string Grammar::forced(size_t max_bytes) {
    return bounded([&] { return forced_from_state(max_bytes); }, std::string());
}

std::string Grammar::forced_from_state(size_t max_bytes) {
    std::string out;
    if (state_.partial.n_remain != 0) return out;
    uint32_t set = state_.set;
    while (out.size() < max_bytes) {
        const Stacks::Set & s = stacks_.set(set);
        if (s.may_end || s.has_token_top || s.stacks.empty()) break;
        uint32_t cp = UINT32_MAX;
        for (uint32_t st : s.stacks) {
            const uint32_t c = stacks_.single_char(stacks_.top_pos(st));
            if (c == UINT32_MAX || (cp != UINT32_MAX && c != cp)) {
                cp = UINT32_MAX;
                break;
            }
            cp = c;
        }
        if (cp == UINT32_MAX || cp == 0 || cp > 0x10FFFF) break;
        std::string enc;
        put_utf8(cp, enc);
        if (out.size() + enc.size() > max_bytes) break;
        set = stacks_.after_char(set, cp);
        if (set == Stacks::NO_SET) break;
        out += enc;
    }
    return out;
}

}  // namespace psl
