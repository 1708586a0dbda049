// The C API of grammars ("grammars" in pyllamaspec.h).
#include "error.h"
#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#include "grammar/token_table.h"
#include "model.h"
#include "pyllamaspec.h"
#include "vocab/vocab.h"

#include <memory>
#include <string>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

using namespace psl;

namespace {

Grammar & grammar_of(psl_grammar * g) {
    if (!g) fail(PSL_ERR_INVALID_ARGUMENT, "grammar is NULL");
    return *g;
}

// A grammar may take hundreds of MB of small blocks (parser stacks, states) before a limit stops
// it; glibc keeps freed blocks in the heap, so the process would stay that large. Given back
// when a grammar goes (issue 48: RSS back within 10% of idle after hostile grammars).
void give_back_heap() {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}

GrammarLimits limits_of(const psl_grammar_limits * l) {
    GrammarLimits out;
    if (!l) return out;
    if (l->max_rules < 0 || l->max_depth < 0 || l->max_elements < 0 || l->max_stacks < 0 || l->max_set < 0 ||
        l->max_set_storage < 0 || l->timeout_ms < 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "grammar limits must be >= 0 (0: no bound)");
    }
    out.max_rules = (uint32_t) l->max_rules;
    out.max_depth = (uint32_t) l->max_depth;
    out.max_elements = (uint64_t) l->max_elements;
    out.max_stacks = (uint32_t) l->max_stacks;
    out.max_set = (uint32_t) l->max_set;
    out.max_set_storage = (uint64_t) l->max_set_storage;
    out.timeout_ms = l->timeout_ms;
    out.cancel = l->cancel;
    return out;
}

}  // namespace

extern "C" {

psl_grammar_limits psl_grammar_default_limits(void) {
    const GrammarLimits d;
    psl_grammar_limits l;
    l.max_rules = (int32_t) d.max_rules;
    l.max_depth = (int32_t) d.max_depth;
    l.max_elements = (int64_t) d.max_elements;
    l.max_stacks = (int32_t) d.max_stacks;
    l.max_set = (int32_t) d.max_set;
    l.max_set_storage = (int64_t) d.max_set_storage;
    l.timeout_ms = (int32_t) d.timeout_ms;
    l.cancel = nullptr;
    return l;
}

psl_status psl_grammar_new(const psl_model * model, const char * text, size_t len, const char * root,
                           const psl_grammar_limits * limits, psl_grammar ** out) {
    return guard([&] {
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        if (!text && len) fail(PSL_ERR_INVALID_ARGUMENT, "text is NULL");
        const GrammarLimits lim = limits_of(limits);
        std::shared_ptr<const Vocab> vocab;
        if (model) {
            if (!model->vocab) fail(PSL_ERR_NO_VOCAB, "a grammar needs the model's tokenizer, which this model lacks");
            vocab = model->vocab;
        }
        // without a vocabulary, a <text> token reference passes the syntax check as any token
        TokenLookup token_of = [&vocab](std::string_view s, int32_t & id) {
            if (!vocab) {
                id = 0;
                return true;
            }
            std::vector<token_id> ids;
            vocab->tokenize(s, false, true, ids);
            if (ids.size() != 1) return false;
            id = ids[0];
            return true;
        };
        struct TrimOnFailure {
            bool ok = false;
            ~TrimOnFailure() { if (!ok) give_back_heap(); }
        } trim;
        Gbnf g;
        const uint32_t start = parse_gbnf(std::string_view(text ? text : "", len), root ? root : "root", token_of,
                                          vocab ? vocab->n_tokens() : -1, lim, g);
        *out = new psl_grammar(g, start, vocab ? TokenTable::of(vocab) : nullptr, lim);
        trim.ok = true;
    });
}

void psl_grammar_free(psl_grammar * g) {
    if (!g) return;
    const bool big = g->large();
    delete g;
    if (big) give_back_heap();
}

psl_status psl_grammar_accept(psl_grammar * g, const int32_t * ids, int32_t n, int32_t * n_accepted) {
    return guard([&] {
        Grammar & gr = grammar_of(g);
        if (n < 0 || (n > 0 && !ids)) fail(PSL_ERR_INVALID_ARGUMENT, "bad ids (n = %d)", n);
        int32_t i = 0;
        while (i < n && gr.accept(ids[i])) ++i;
        if (n_accepted) *n_accepted = i;
    });
}

psl_status psl_grammar_rewind(psl_grammar * g, int32_t n) {
    return guard([&] { grammar_of(g).rewind(n); });
}

int32_t psl_grammar_n_accepted(const psl_grammar * g) { return g ? g->n_accepted() : 0; }

psl_status psl_grammar_mask(psl_grammar * g, uint8_t * allowed, int32_t n) {
    return guard([&] {
        Grammar & gr = grammar_of(g);
        if (n < 0 || (n > 0 && !allowed)) fail(PSL_ERR_INVALID_ARGUMENT, "bad mask buffer (n = %d)", n);
        gr.mask(allowed, n);
    });
}

psl_status psl_grammar_allows(psl_grammar * g, int32_t id, bool * allowed) {
    return guard([&] {
        Grammar & gr = grammar_of(g);
        if (!allowed) fail(PSL_ERR_INVALID_ARGUMENT, "allowed is NULL");
        *allowed = gr.allows(id);
    });
}

bool psl_grammar_may_end(const psl_grammar * g) { return g && g->may_end(); }

const char * psl_grammar_failure(const psl_grammar * g) {
    return g && !g->failure().empty() ? g->failure().c_str() : nullptr;
}

psl_status psl_grammar_dead_end(psl_grammar * g, bool * dead_end) {
    return guard([&] {
        Grammar & gr = grammar_of(g);
        if (!dead_end) fail(PSL_ERR_INVALID_ARGUMENT, "dead_end is NULL");
        *dead_end = gr.dead_end();
    });
}

psl_status psl_grammar_forced(psl_grammar * g, char * buf, size_t cap, size_t * n_out) {
    return guard([&] {
        Grammar & gr = grammar_of(g);
        if (cap && !buf) fail(PSL_ERR_INVALID_ARGUMENT, "buf is NULL");
        const std::string s = gr.forced(cap);
        if (!s.empty()) std::copy(s.begin(), s.end(), buf);
        if (n_out) *n_out = s.size();
    });
}

}  // extern "C"
