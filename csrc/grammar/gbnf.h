// GBNF grammars (llama.cpp's grammar syntax) parsed into rules of elements: the language is
// llama.cpp's to the byte, so that a grammar constrains our sampling exactly as it constrains
// llama-server's. Syntax: `name ::= alternatives` rules; "literals" with \x \u \U \t \r \n
// escapes; [classes], [^negated], ranges; `.`; ( groups ); * + ? {m} {m,} {m,n} repetitions;
// <[id]> / <text> tokens and !<...> (any token but); # comments. Newlines end a rule's body
// except inside parentheses or after `|`.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace psl {

enum class GType : uint8_t {
    END = 0,         // end of a rule
    ALT,             // start of the next alternative
    RULE_REF,        // value: a rule id
    CHAR,            // value: a code point (the first of a class)
    CHAR_NOT,        // the first of a negated class
    CHAR_RNG_UPPER,  // makes the preceding char element a range up to value
    CHAR_ALT,        // one more char of the class
    CHAR_ANY,        // `.`
    TOKEN,           // value: a token id
    TOKEN_NOT,       // any token but value
};

struct GElem {
    GType type;
    uint32_t value;
};

using GRule = std::vector<GElem>;

// What a grammar may cost, so that no text a client sends can exhaust the stack, the memory or
// the time of the process (psl_grammar_limits in pyllamaspec.h; 0 in a field: no bound).
struct GrammarLimits {
    uint32_t max_rules = 100000;          // rules, repetitions expanded
    uint32_t max_depth = 1000;            // nested parentheses (the parser recurses on them)
    uint64_t max_elements = 1u << 22;     // grammar elements, repetitions expanded
    uint32_t max_stacks = 1u << 18;       // distinct parser stacks, ever (compile and run time)
    uint32_t max_set = 1u << 16;          // parser stacks alive at once (one state)
    uint64_t max_set_storage = 1u << 23;  // stack ids held by all states interned, ever
    int64_t timeout_ms = 1000;            // compiling: parsing, checks, the first state
    const volatile int32_t * cancel = nullptr;   // nonzero (set by another thread): stop compiling
};

struct Gbnf {
    std::vector<GRule> rules;                  // by symbol id; each ends with END
    std::map<std::string, uint32_t> symbols;   // name -> id (groups and repetitions get generated names)
};

// The token a <text> reference names (the text tokenized with special tokens parsed must be
// exactly one token); false if it is not. Empty: <text> references are refused.
using TokenLookup = std::function<bool(std::string_view text, int32_t & id)>;

// Parses GBNF text and checks it: every referenced rule defined, `root` present, no left
// recursion, token ids below n_tokens (n_tokens < 0: not checked), within limits. Returns the
// root's id. Throws Error(PSL_ERR_INVALID_ARGUMENT) naming the problem and where (line:column),
// or the limit passed.
uint32_t parse_gbnf(std::string_view text, const std::string & root, const TokenLookup & token_of,
                    int32_t n_tokens, const GrammarLimits & limits, Gbnf & out);

}  // namespace psl
