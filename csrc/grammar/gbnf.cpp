// The GBNF parser (gbnf.h). It follows llama.cpp's reading of the syntax in every detail that
// changes the language: which characters end a rule, how escapes and UTF-8 in the grammar text
// decode, how repetitions expand (and that a bound over 2000 means "unbounded"), the limits it
// refuses. Error messages say where, as line:column, and what was expected.
#include "grammar/gbnf.h"

#include "error.h"

#include <algorithm>
#include <limits>

namespace psl {

namespace {

constexpr uint64_t MAX_REPETITION = 2000;   // llama.cpp's MAX_REPETITION_THRESHOLD
constexpr uint64_t NO_MAX = std::numeric_limits<uint64_t>::max();

bool is_digit(char c) { return '0' <= c && c <= '9'; }
bool is_word(char c) { return ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || c == '-' || is_digit(c); }

bool is_end_of_sequence(const GElem & e) { return e.type == GType::END || e.type == GType::ALT; }

class Parser {
public:
    Parser(const char * text, const TokenLookup & token_of, const GrammarLimits & limits)
        : begin_(text), token_of_(token_of), limits_(limits) {}

    Gbnf run() {
        const char * pos = space(begin_, true);
        while (*pos) pos = rule(pos);
        return std::move(g_);
    }

private:
    const char * begin_;
    const TokenLookup & token_of_;
    const GrammarLimits & limits_;
    Gbnf g_;
    uint32_t depth_ = 0;          // parentheses open now
    uint64_t n_elements_ = 0;     // elements in the rules set so far

    [[noreturn]] void error(const char * at, const std::string & what) const {
        int line = 1, col = 1;
        for (const char * p = begin_; p < at && *p; ++p) {
            if (*p == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        std::string near(at, std::min<size_t>(std::char_traits<char>::length(at), 20));
        for (char & c : near) {
            if (c == '\n' || c == '\r') c = ' ';
        }
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar: %s at line %d, column %d%s%s%s", what.c_str(), line, col,
             near.empty() ? " (end of input)" : " near '", near.c_str(), near.empty() ? "" : "'");
    }

    void check_n_rules(const char * at) const {
        if (limits_.max_rules && g_.symbols.size() >= limits_.max_rules) {
            error(at, "more than " + std::to_string(limits_.max_rules) + " rules (max_rules), repetitions expanded");
        }
    }

    void check_n_elements(const char * at, uint64_t more) const {
        if (limits_.max_elements && n_elements_ + more > limits_.max_elements) {
            error(at, "more than " + std::to_string(limits_.max_elements) +
                      " grammar elements (max_elements), repetitions expanded");
        }
    }

    uint32_t symbol(const std::string & name, const char * at) {
        auto it = g_.symbols.find(name);
        if (it != g_.symbols.end()) return it->second;
        check_n_rules(at);
        return g_.symbols.emplace(name, (uint32_t) g_.symbols.size()).first->second;
    }

    uint32_t fresh_symbol(const std::string & base, const char * at) {
        check_n_rules(at);
        const uint32_t id = (uint32_t) g_.symbols.size();
        g_.symbols[base + '_' + std::to_string(id)] = id;
        return id;
    }

    void set_rule(uint32_t id, GRule r, const char * at) {
        check_n_elements(at, r.size());
        n_elements_ += r.size();
        if (g_.rules.size() <= id) g_.rules.resize(id + 1);
        g_.rules[id] = std::move(r);
    }

    static const char * space(const char * pos, bool newline_ok) {
        while (*pos == ' ' || *pos == '\t' || *pos == '#' || (newline_ok && (*pos == '\r' || *pos == '\n'))) {
            if (*pos == '#') {
                while (*pos && *pos != '\r' && *pos != '\n') ++pos;
            } else {
                ++pos;
            }
        }
        return pos;
    }

    const char * name_end(const char * pos) const {
        const char * p = pos;
        while (is_word(*p)) ++p;
        if (p == pos) error(pos, "expecting a rule name");
        return p;
    }

    const char * int_end(const char * pos) const {
        const char * p = pos;
        while (is_digit(*p)) ++p;
        if (p == pos) error(pos, "expecting an integer");
        return p;
    }

    uint64_t integer(const char * from, const char * to) const {
        uint64_t v = 0;
        for (const char * p = from; p < to; ++p) {
            if (v > (NO_MAX - 9) / 10) error(from, "number too large");
            v = v * 10 + (uint64_t) (*p - '0');
        }
        return v;
    }

    // A code point of the grammar text, read as llama.cpp reads it (a bad byte is taken as is).
    static std::pair<uint32_t, const char *> utf8(const char * src) {
        static const int len_of[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
        const uint8_t first = (uint8_t) *src;
        const int len = len_of[first >> 4];
        uint32_t value = first & ((1u << (8 - len)) - 1);
        const char * p = src + 1;
        for (; p < src + len && *p; ++p) value = (value << 6) + ((uint8_t) *p & 0x3F);
        return {value, p};
    }

    std::pair<uint32_t, const char *> hex(const char * src, int size) const {
        uint32_t value = 0;
        const char * p = src;
        for (; p < src + size && *p; ++p) {
            const char c = *p;
            value <<= 4;
            if ('a' <= c && c <= 'f') value += c - 'a' + 10;
            else if ('A' <= c && c <= 'F') value += c - 'A' + 10;
            else if (is_digit(c)) value += c - '0';
            else break;
        }
        if (p != src + size) error(src, "expecting " + std::to_string(size) + " hex digits");
        return {value, p};
    }

    std::pair<uint32_t, const char *> character(const char * src) const {
        if (*src == '\\') {
            switch (src[1]) {
                case 'x': return hex(src + 2, 2);
                case 'u': return hex(src + 2, 4);
                case 'U': return hex(src + 2, 8);
                case 't': return {'\t', src + 2};
                case 'r': return {'\r', src + 2};
                case 'n': return {'\n', src + 2};
                case '\\': case '"': case '[': case ']': case '-': return {(uint8_t) src[1], src + 2};
                default: error(src, "unknown escape");
            }
        }
        if (*src) return utf8(src);
        error(src, "unexpected end of input");
    }

    std::pair<uint32_t, const char *> token(const char * src) const {
        const char * pos = src;
        if (*pos != '<') error(pos, "expecting '<'");
        ++pos;
        if (*pos == '[') {
            const char * digits = pos + 1;
            const char * end = int_end(digits);
            const uint64_t id = integer(digits, end);
            if (id > std::numeric_limits<uint32_t>::max()) error(digits, "token id too large");
            if (end[0] != ']') error(end, "expecting ']'");
            if (end[1] != '>') error(end + 1, "expecting '>'");
            return {(uint32_t) id, end + 2};
        }
        while (*pos && *pos != '>') ++pos;
        if (*pos != '>') error(pos, "expecting '>'");
        ++pos;
        int32_t id = -1;
        if (!token_of_) error(src, "a token by its text (<...>) needs the model's vocabulary");
        if (!token_of_(std::string_view(src, (size_t) (pos - src)), id)) {
            error(src, "'" + std::string(src, (size_t) (pos - src)) + "' is not one token of this vocabulary");
        }
        return {(uint32_t) id, pos};
    }

    const char * rule(const char * src) {
        const char * end = name_end(src);
        const char * pos = space(end, false);
        const std::string name(src, (size_t) (end - src));
        const uint32_t id = symbol(name, src);
        if (!(pos[0] == ':' && pos[1] == ':' && pos[2] == '=')) error(pos, "expecting ::=");
        pos = alternates(space(pos + 3, true), name, id, false);
        if (*pos == '\r') {
            pos += pos[1] == '\n' ? 2 : 1;
        } else if (*pos == '\n') {
            ++pos;
        } else if (*pos) {
            error(pos, "expecting newline or end");
        }
        return space(pos, true);
    }

    const char * alternates(const char * src, const std::string & name, uint32_t id, bool nested) {
        GRule r;
        const char * pos = sequence(src, name, r, nested);
        while (*pos == '|') {
            r.push_back({GType::ALT, 0});
            pos = sequence(space(pos + 1, true), name, r, nested);
        }
        r.push_back({GType::END, 0});
        set_rule(id, std::move(r), pos);
        return pos;
    }

    // The state of a sequence being read: where its last item starts, and how many rules that
    // item stands for (the product bounds how far repetitions may multiply them, as llama.cpp).
    struct Seq {
        GRule & r;
        size_t last_start;
        uint64_t n_prev_rules = 1;
    };

    const char * sequence(const char * src, const std::string & name, GRule & r, bool nested);
    const char * char_class(const char * pos, Seq & s, bool nested);
    const char * braces(const char * pos, Seq & s, const std::string & name, bool nested);
    void repeat(Seq & s, const char * at, const std::string & name, uint64_t lo, uint64_t hi);
};

const char * Parser::sequence(const char * src, const std::string & name, GRule & r, bool nested) {
    Seq s{r, r.size()};
    const char * pos = src;
    while (*pos) {
        const char c = *pos;
        if (c == '"') {
            ++pos;
            s.last_start = r.size();
            s.n_prev_rules = 1;
            while (*pos != '"') {
                if (!*pos) error(pos, "unexpected end of input in a string");
                auto [cp, next] = character(pos);
                r.push_back({GType::CHAR, cp});
                pos = next;
            }
            pos = space(pos + 1, nested);
        } else if (c == '[') {
            pos = char_class(pos + 1, s, nested);
        } else if (c == '<' || c == '!') {
            const GType type = c == '!' ? GType::TOKEN_NOT : GType::TOKEN;
            auto [id, next] = token(c == '!' ? pos + 1 : pos);
            s.last_start = r.size();
            s.n_prev_rules = 1;
            r.push_back({type, id});
            pos = space(next, nested);
        } else if (is_word(c)) {
            const char * end = name_end(pos);
            const uint32_t ref = symbol(std::string(pos, (size_t) (end - pos)), pos);
            pos = space(end, nested);
            s.last_start = r.size();
            s.n_prev_rules = 1;
            r.push_back({GType::RULE_REF, ref});
        } else if (c == '(') {
            // groups are read by recursion: their depth is what bounds the parser's stack
            if (limits_.max_depth && depth_ >= limits_.max_depth) {
                error(pos, "parentheses nested deeper than " + std::to_string(limits_.max_depth) + " (max_depth)");
            }
            pos = space(pos + 1, true);
            const size_t n_before = g_.symbols.size();
            const uint32_t sub = fresh_symbol(name, pos);
            ++depth_;
            pos = alternates(pos, name, sub, true);
            --depth_;
            s.n_prev_rules = std::max<uint64_t>(1, g_.symbols.size() - n_before);
            s.last_start = r.size();
            r.push_back({GType::RULE_REF, sub});
            if (*pos != ')') error(pos, "expecting ')'");
            pos = space(pos + 1, nested);
        } else if (c == '.') {
            s.last_start = r.size();
            s.n_prev_rules = 1;
            r.push_back({GType::CHAR_ANY, 0});
            pos = space(pos + 1, nested);
        } else if (c == '*' || c == '+' || c == '?') {
            const char * at = pos;
            pos = space(pos + 1, nested);
            repeat(s, at, name, c == '+' ? 1 : 0, c == '?' ? 1 : NO_MAX);
        } else if (c == '{') {
            pos = braces(pos, s, name, nested);
        } else {
            break;
        }
    }
    return pos;
}

const char * Parser::char_class(const char * pos, Seq & s, bool nested) {
    GType first = GType::CHAR;
    if (*pos == '^') {
        ++pos;
        first = GType::CHAR_NOT;
    }
    GRule & r = s.r;
    s.last_start = r.size();
    s.n_prev_rules = 1;
    while (*pos != ']') {
        if (!*pos) error(pos, "unexpected end of input in a character class");
        auto [cp, next] = character(pos);
        pos = next;
        r.push_back({s.last_start < r.size() ? GType::CHAR_ALT : first, cp});
        if (pos[0] == '-' && pos[1] != ']') {
            if (!pos[1]) error(pos + 1, "unexpected end of input in a character class");
            auto [hi, after] = character(pos + 1);
            pos = after;
            r.push_back({GType::CHAR_RNG_UPPER, hi});
        }
    }
    return space(pos + 1, nested);
}

const char * Parser::braces(const char * pos, Seq & s, const std::string & name, bool nested) {
    const char * at = pos;
    pos = space(pos + 1, nested);
    if (!is_digit(*pos)) error(pos, "expecting an integer");
    const char * end = int_end(pos);
    const uint64_t lo = integer(pos, end);
    pos = space(end, nested);
    uint64_t hi = NO_MAX;
    if (*pos == '}') {
        hi = lo;
        pos = space(pos + 1, nested);
    } else if (*pos == ',') {
        pos = space(pos + 1, nested);
        if (is_digit(*pos)) {
            const char * e = int_end(pos);
            hi = integer(pos, e);
            pos = space(e, nested);
        }
        if (*pos != '}') error(pos, "expecting '}'");
        pos = space(pos + 1, nested);
    } else {
        error(pos, "expecting ',' or '}'");
    }
    if (lo > MAX_REPETITION) error(at, "more than 2000 repetitions");
    if (hi != NO_MAX && hi > MAX_REPETITION) hi = NO_MAX;   // llama.cpp: a bound this large is no bound
    if (hi != NO_MAX && hi < lo) error(at, "the maximum of a repetition is below its minimum");
    repeat(s, at, name, lo, hi);
    return pos;
}

// S{m,n} -> S..S (m times) then a chain of n - m optional S (S'(1) ::= S |, S'(k) ::= S S'(k-1) |);
// S{m,} -> S..S S' with S' ::= S S' | (the rewrite llama.cpp makes, so the rules count the same).
void Parser::repeat(Seq & s, const char * at, const std::string & name, uint64_t lo, uint64_t hi) {
    GRule & r = s.r;
    if (s.last_start == r.size()) error(at, "expecting an item before */+/?/{");
    const bool unbounded = hi == NO_MAX;
    const GRule item(r.begin() + (long) s.last_start, r.end());
    const uint64_t total = (!unbounded && hi > 0) ? hi : (lo > 0 ? lo : 1);
    if (s.n_prev_rules * total > MAX_REPETITION) {
        error(at, "the repetitions multiply into more than 2000 rules (reduce the repetitions or the rule's size)");
    }
    const uint64_t n_copies = (lo > 0 ? lo - 1 : 0) + (unbounded ? 1 : hi - lo);
    check_n_elements(at, r.size() + n_copies * (item.size() + 3));   // before anything is copied
    if (lo == 0) {
        r.resize(s.last_start);
    } else {
        for (uint64_t i = 1; i < lo; ++i) r.insert(r.end(), item.begin(), item.end());
    }
    const uint64_t n_opt = unbounded ? 1 : hi - lo;
    uint32_t last = 0;
    for (uint64_t i = 0; i < n_opt; ++i) {
        GRule opt(item);
        const uint32_t id = fresh_symbol(name, at);
        if (i > 0 || unbounded) opt.push_back({GType::RULE_REF, unbounded ? id : last});
        opt.push_back({GType::ALT, 0});
        opt.push_back({GType::END, 0});
        set_rule(id, std::move(opt), at);
        last = id;
    }
    if (n_opt > 0) r.push_back({GType::RULE_REF, last});
    s.n_prev_rules *= total;
}

std::string name_of(const Gbnf & g, uint32_t id) {
    for (const auto & [name, i] : g.symbols) {
        if (i == id) return name;
    }
    return "#" + std::to_string(id);
}

// llama.cpp's test: a rule is left-recursive when it can reach itself through leftmost
// nonterminals, skipping nonterminals that may derive the empty string (an empty alternative
// of their own). A depth-first search on an explicit stack (a chain of 100,000 rules must not
// exhaust the thread's stack); rules already searched are not searched again.
struct LeftRecursion {
    const Gbnf & g;
    std::vector<bool> visited, in_progress, may_be_empty;

    explicit LeftRecursion(const Gbnf & gr)
        : g(gr), visited(gr.rules.size()), in_progress(gr.rules.size()), may_be_empty(gr.rules.size()) {}

    struct Frame {
        uint32_t rule;
        uint32_t pos = 0;          // the element looked at next
        bool leftmost = true;      // it starts an alternative, but for empty-deriving rules
        bool returning = false;    // the rule at pos has just been searched
    };

    void enter(uint32_t i, std::vector<Frame> & st) {
        in_progress[i] = true;
        bool at_start = true;
        for (const GElem & e : g.rules[i]) {
            if (is_end_of_sequence(e)) {
                if (at_start) {
                    may_be_empty[i] = true;
                    break;
                }
                at_start = true;
            } else {
                at_start = false;
            }
        }
        st.push_back(Frame{i});
    }

    // Whether a left recursion is reachable from rule i.
    bool from(uint32_t i) {
        std::vector<Frame> st;
        enter(i, st);
        while (!st.empty()) {
            Frame & f = st.back();
            const GRule & r = g.rules[f.rule];
            if (f.pos == r.size()) {
                in_progress[f.rule] = false;
                visited[f.rule] = true;
                st.pop_back();
                continue;
            }
            const GElem & e = r[f.pos];
            if (e.type == GType::RULE_REF && f.leftmost) {
                if (!f.returning) {
                    if (in_progress[e.value]) return true;
                    if (!visited[e.value]) {
                        f.returning = true;
                        enter(e.value, st);   // f may move: not used again before the loop
                        continue;
                    }
                }
                f.returning = false;
                if (!may_be_empty[e.value]) f.leftmost = false;
            } else {
                f.leftmost = is_end_of_sequence(e);
            }
            ++f.pos;
        }
        return false;
    }
};

void check(const Gbnf & g, int32_t n_tokens) {
    for (size_t i = 0; i < g.rules.size(); ++i) {
        if (g.rules[i].empty()) {
            fail(PSL_ERR_INVALID_ARGUMENT, "grammar: rule '%s' is used but not defined", name_of(g, (uint32_t) i).c_str());
        }
        for (const GElem & e : g.rules[i]) {
            if (e.type == GType::RULE_REF && (e.value >= g.rules.size() || g.rules[e.value].empty())) {
                fail(PSL_ERR_INVALID_ARGUMENT, "grammar: rule '%s' is used but not defined", name_of(g, e.value).c_str());
            }
            if ((e.type == GType::TOKEN || e.type == GType::TOKEN_NOT) && n_tokens >= 0 && e.value >= (uint32_t) n_tokens) {
                fail(PSL_ERR_INVALID_ARGUMENT, "grammar: token <[%u]> is outside the vocabulary [0, %d)", e.value, n_tokens);
            }
        }
    }
    LeftRecursion lr(g);
    for (uint32_t i = 0; i < (uint32_t) g.rules.size(); ++i) {
        if (!lr.visited[i] && lr.from(i)) {
            fail(PSL_ERR_INVALID_ARGUMENT, "grammar: rule '%s' is left-recursive (not supported)", name_of(g, (uint32_t) i).c_str());
        }
    }
}

}  // namespace

uint32_t parse_gbnf(std::string_view text, const std::string & root, const TokenLookup & token_of,
                    int32_t n_tokens, const GrammarLimits & limits, Gbnf & out) {
    if (text.find('\0') != std::string_view::npos) fail(PSL_ERR_INVALID_ARGUMENT, "grammar: the text contains a NUL byte");
    const std::string src(text);   // NUL-terminated: the reader looks one byte ahead
    out = Parser(src.c_str(), token_of, limits).run();
    if (out.rules.empty()) fail(PSL_ERR_INVALID_ARGUMENT, "grammar: no rules");
    check(out, n_tokens);
    const auto it = out.symbols.find(root);
    if (it == out.symbols.end()) fail(PSL_ERR_INVALID_ARGUMENT, "grammar: no rule named '%s' (the start rule)", root.c_str());
    return it->second;
}

}  // namespace psl
