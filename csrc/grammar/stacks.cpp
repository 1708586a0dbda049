// Stacks (stacks.h): llama.cpp's pushdown matching over interned stacks and sets of stacks.
#include "grammar/stacks.h"

#include "error.h"

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace psl {

namespace {

constexpr size_t MAX_MOVES = 1u << 22;   // memoized moves kept before trim() starts afresh

bool is_char_elem(GType t) {
    return t == GType::CHAR || t == GType::CHAR_NOT || t == GType::CHAR_ANY;
}

int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Stacks::Stacks(const Gbnf & g, uint32_t root, const GrammarLimits & limits) : limits_(limits) {
    if (limits_.timeout_ms > 0) deadline_ns_ = now_ns() + limits_.timeout_ms * 1000000;
    for (const GRule & r : g.rules) {
        rule_start_.push_back((uint32_t) elems_.size());
        elems_.insert(elems_.end(), r.begin(), r.end());
    }
    // the position after each terminal: past a whole character class, or the next element
    after_.assign(elems_.size(), 0);
    for (uint32_t p = 0; p < (uint32_t) elems_.size(); ++p) {
        const GType t = elems_[p].type;
        if (t == GType::TOKEN || t == GType::TOKEN_NOT) {
            after_[p] = p + 1;
        } else if (is_char_elem(t)) {
            uint32_t q = p + 1;
            while (elems_[q].type == GType::CHAR_ALT || elems_[q].type == GType::CHAR_RNG_UPPER) ++q;
            after_[p] = q;
        }
    }
    nodes_.push_back(Node{0, 0});             // EMPTY_STACK
    advanced_.emplace_back();
    succ_.emplace_back();
    succ_done_.push_back(0);
    sets_.emplace_back();                     // NO_SET
    set_index_.emplace(std::vector<uint32_t>{}, NO_SET);
    // the root's alternatives, each advanced to its terminals
    std::vector<uint32_t> start;
    for (uint32_t p = rule_start_[root];;) {
        const uint32_t s = end_of_seq(p) ? EMPTY_STACK : push(EMPTY_STACK, p);
        const auto & adv = advance(s);
        start.insert(start.end(), adv.begin(), adv.end());
        while (!end_of_seq(p)) ++p;
        if (elems_[p].type != GType::ALT) break;
        ++p;
    }
    initial_ = intern(std::move(start));
    deadline_ns_ = 0;            // compiled: the time limit and the cancel were the compile's
    limits_.cancel = nullptr;
}

// Called for every stack made and state interned: the compile's time limit and cancel (checked
// every 1024 calls, as a clock read costs more than the work between).
void Stacks::tick() {
    if ((++ticks_ & 1023) != 0 || (!deadline_ns_ && !limits_.cancel)) return;   // the clock costs more
    if (limits_.cancel && *limits_.cancel) fail(PSL_ERR_INTERRUPTED, "grammar: compiling was cancelled");
    if (deadline_ns_ && now_ns() > deadline_ns_) {
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar: %s took more than %lld ms (timeout_ms): the grammar is too "
             "complex (its parser states multiply: nested repetitions, many alternatives)",
             initial_ == NO_SET ? "compiling" : "one step",
             (long long) limits_.timeout_ms);
    }
}

uint32_t Stacks::push(uint32_t parent, uint32_t pos) {
    const uint64_t key = ((uint64_t) parent << 32) | pos;
    auto it = node_index_.find(key);
    if (it != node_index_.end()) return it->second;
    const uint32_t id = (uint32_t) nodes_.size();
    if ((limits_.max_stacks && id > limits_.max_stacks) || id == UINT32_MAX) {
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar: more than %u parser stacks (max_stacks): the grammar is too complex "
             "(its parser states multiply: nested repetitions, many alternatives)", limits_.max_stacks);
    }
    tick();
    nodes_.push_back(Node{pos, parent});
    advanced_.emplace_back();
    succ_.emplace_back();
    succ_done_.push_back(0);
    node_index_.emplace(key, id);
    return id;
}

// llama.cpp's advance_stack: expands the rule references on top (every alternative) until each
// stack shows a terminal or is empty. Stacks seen once are not expanded again.
const std::vector<uint32_t> & Stacks::advance(uint32_t stack) {
    if (!advanced_[stack].empty()) return advanced_[stack];
    std::vector<uint32_t> out, todo{stack};
    std::unordered_set<uint32_t> seen;     // a set: 200,000 alternatives are one rule's
    while (!todo.empty()) {
        const uint32_t s = todo.back();
        todo.pop_back();
        tick();
        if (!seen.insert(s).second) continue;
        if (s == EMPTY_STACK || elems_[nodes_[s].pos].type != GType::RULE_REF) {
            out.push_back(s);
            continue;
        }
        const uint32_t pos = nodes_[s].pos;
        const uint32_t below = end_of_seq(pos + 1) ? nodes_[s].parent : push(nodes_[s].parent, pos + 1);
        for (uint32_t p = rule_start_[elems_[pos].value];;) {
            todo.push_back(end_of_seq(p) ? below : push(below, p));
            while (!end_of_seq(p)) ++p;
            if (elems_[p].type != GType::ALT) break;
            ++p;
        }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    advanced_[stack] = std::move(out);
    return advanced_[stack];
}

// The stacks after the terminal on top of `stack` is matched (by a character or a token).
const std::vector<uint32_t> & Stacks::successors(uint32_t stack) {
    if (!succ_done_[stack]) {
        const uint32_t next = after_[nodes_[stack].pos];
        const uint32_t below = end_of_seq(next) ? nodes_[stack].parent : push(nodes_[stack].parent, next);
        const std::vector<uint32_t> adv = advance(below);   // a copy: advance may grow succ_
        succ_[stack] = adv;
        succ_done_[stack] = 1;
    }
    return succ_[stack];
}

uint32_t Stacks::intern(std::vector<uint32_t> stacks) {
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    auto it = set_index_.find(stacks);
    if (it != set_index_.end()) return it->second;
    if (limits_.max_set && stacks.size() > limits_.max_set) {
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar: more than %u parser stacks at once (max_set; %zu here): the grammar "
             "is too complex", limits_.max_set, stacks.size());
    }
    set_storage_ += stacks.size();
    if (limits_.max_set_storage && set_storage_ > limits_.max_set_storage) {
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar: its parser states hold more than %llu stacks (max_set_storage): the "
             "grammar is too complex", (unsigned long long) limits_.max_set_storage);
    }
    tick();
    const uint32_t id = (uint32_t) sets_.size();
    Set s;
    s.stacks = stacks;
    std::vector<uint32_t> chars;
    for (uint32_t st : stacks) {
        if (st == EMPTY_STACK) s.may_end = true;
        else if (is_token_top(st)) s.has_token_top = true;
        else chars.push_back(st);
    }
    sets_.push_back(std::move(s));
    set_index_.emplace(std::move(stacks), id);
    // its character part: itself, or a set of its own
    const uint32_t cp = chars.size() == sets_[id].stacks.size() ? id : intern(std::move(chars));
    sets_[id].chars_only = cp;
    return id;
}

uint32_t Stacks::char_part(uint32_t set) { return sets_[set].chars_only; }

uint32_t Stacks::unite(uint32_t a, uint32_t b) {
    if (a == NO_SET || a == b) return b;
    if (b == NO_SET) return a;
    std::vector<uint32_t> both = sets_[a].stacks;
    both.insert(both.end(), sets_[b].stacks.begin(), sets_[b].stacks.end());
    return intern(std::move(both));
}

bool Stacks::is_char_top(uint32_t stack) const {
    return stack != EMPTY_STACK && is_char_elem(elems_[nodes_[stack].pos].type);
}

bool Stacks::is_token_top(uint32_t stack) const {
    if (stack == EMPTY_STACK) return false;
    const GType t = elems_[nodes_[stack].pos].type;
    return t == GType::TOKEN || t == GType::TOKEN_NOT;
}

uint32_t Stacks::after_char(uint32_t set, uint32_t cp) {
    const uint64_t key = ((uint64_t) set << 22) | cp;   // decoded code points < 2^22
    auto it = moves_.find(key);
    if (it != moves_.end()) return it->second;
    std::vector<uint32_t> next;
    const std::vector<uint32_t> stacks = sets_[set].stacks;   // a copy: successors may grow sets_
    for (uint32_t s : stacks) {
        tick();
        if (is_char_top(s) && match_char(nodes_[s].pos, cp)) {
            const auto & succ = successors(s);
            next.insert(next.end(), succ.begin(), succ.end());
        }
    }
    const uint32_t id = next.empty() ? NO_SET : intern(std::move(next));
    moves_.emplace(key, id);
    return id;
}

uint32_t Stacks::after_token(uint32_t set, int32_t token) {
    if (!sets_[set].has_token_top) return NO_SET;
    std::vector<uint32_t> next;
    const std::vector<uint32_t> stacks = sets_[set].stacks;
    for (uint32_t s : stacks) {
        if (is_token_top(s) && match_token(elems_[nodes_[s].pos], token)) {
            const auto & succ = successors(s);
            next.insert(next.end(), succ.begin(), succ.end());
        }
    }
    return next.empty() ? NO_SET : intern(std::move(next));
}

// llama.cpp's match_char: a class is its first element, then CHAR_ALT / CHAR_RNG_UPPER ones.
bool Stacks::match_char(uint32_t pos, uint32_t cp) const {
    const GElem * e = &elems_[pos];
    const bool positive = e->type == GType::CHAR || e->type == GType::CHAR_ANY;
    bool found = false;
    do {
        if (e[1].type == GType::CHAR_RNG_UPPER) {
            found = found || (e->value <= cp && cp <= e[1].value);
            e += 2;
        } else if (e->type == GType::CHAR_ANY) {
            found = true;
            e += 1;
        } else {
            found = found || e->value == cp;
            e += 1;
        }
    } while (e->type == GType::CHAR_ALT);
    return found == positive;
}

// llama.cpp's match_partial_char: could some completion of the partial character match?
bool Stacks::match_partial(uint32_t pos, Utf8Partial p) const {
    const GElem * e = &elems_[pos];
    const bool positive = e->type == GType::CHAR || e->type == GType::CHAR_ANY;
    if (p.n_remain < 0 || (p.n_remain == 1 && p.value < 2)) return false;   // invalid, or overlong
    uint32_t low = p.value << (p.n_remain * 6);
    const uint32_t high = low | ((1u << (p.n_remain * 6)) - 1);
    if (low == 0) {
        if (p.n_remain == 2) low = 1u << 11;
        else if (p.n_remain == 3) low = 1u << 16;
    }
    do {
        if (e[1].type == GType::CHAR_RNG_UPPER) {
            if (e->value <= high && low <= e[1].value) return positive;
            e += 2;
        } else if (e->type == GType::CHAR_ANY) {
            return true;
        } else {
            if (low <= e->value && e->value <= high) return positive;
            e += 1;
        }
    } while (e->type == GType::CHAR_ALT);
    return !positive;
}

uint32_t Stacks::single_char(uint32_t pos) const {
    const GElem & e = elems_[pos];
    if (e.type != GType::CHAR || elems_[pos + 1].type == GType::CHAR_ALT) return UINT32_MAX;
    if (elems_[pos + 1].type == GType::CHAR_RNG_UPPER) {
        if (elems_[pos + 1].value != e.value || elems_[pos + 2].type == GType::CHAR_ALT) return UINT32_MAX;
    }
    return e.value;
}

void Stacks::begin_op() {
    deadline_ns_ = limits_.timeout_ms > 0 ? now_ns() + limits_.timeout_ms * 1000000 : 0;
}

void Stacks::trim() {
    if (moves_.size() > MAX_MOVES) moves_.clear();
}

}  // namespace psl
