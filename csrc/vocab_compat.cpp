// Can a draft model speculate for a target? Only if both tokenize alike: same ids, same token
// text, same special tokens. Compared on the GGUF tokenizer arrays, once per pair.
#include "error.h"
#include "model.h"
#include "pyllamaspec.h"

#include "gguf.h"

#include <cstring>
#include <string>

using psl::fail;

namespace {

int64_t find_arr(const gguf_context * g, const char * key, gguf_type type) {
    const int64_t i = gguf_find_key(g, key);
    if (i < 0 || gguf_get_kv_type(g, i) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, i) != type) return -1;
    return i;
}

int64_t special_id(const psl_model * m, const char * key) {
    const std::string k = std::string("tokenizer.ggml.") + key;
    return m->file->get_int(k, -1);
}

void check(const psl_model * t, const psl_model * d) {
    if (!t->arch || !d->arch) fail(PSL_ERR_INVALID_ARGUMENT, "both models must be loaded with their weights");
    if (t->hp.n_vocab != d->hp.n_vocab) {
        const bool tbig = t->hp.n_vocab > d->hp.n_vocab;
        fail(PSL_ERR_UNSUPPORTED,
             "vocabularies differ in size: the target has %d ids, the draft %d; ids %d..%d exist only in the %s",
             t->hp.n_vocab, d->hp.n_vocab, tbig ? d->hp.n_vocab : t->hp.n_vocab,
             (tbig ? t->hp.n_vocab : d->hp.n_vocab) - 1, tbig ? "target" : "draft");
    }
    const int64_t tt = find_arr(t->gguf, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    const int64_t dt = find_arr(d->gguf, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    if (tt < 0 || dt < 0) {
        fail(PSL_ERR_NO_VOCAB, "the %s has no tokenizer.ggml.tokens: cannot check that the vocabularies match",
             tt < 0 ? "target" : "draft");
    }
    const size_t nt = gguf_get_arr_n(t->gguf, tt), nd = gguf_get_arr_n(d->gguf, dt);
    if (nt != nd) {
        fail(PSL_ERR_UNSUPPORTED, "tokenizers differ in size: the target has %zu tokens, the draft %zu; ids %zu..%zu "
             "exist only in the %s", nt, nd, std::min(nt, nd), std::max(nt, nd) - 1, nt > nd ? "target" : "draft");
    }
    for (size_t i = 0; i < nt; ++i) {
        const char * a = gguf_get_arr_str(t->gguf, tt, i);
        const char * b = gguf_get_arr_str(d->gguf, dt, i);
        if (strcmp(a, b) != 0) {
            fail(PSL_ERR_UNSUPPORTED, "vocabularies differ at id %zu: the target has '%.40s', the draft '%.40s'", i, a, b);
        }
    }
    const int64_t ty_t = find_arr(t->gguf, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
    const int64_t ty_d = find_arr(d->gguf, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
    if ((ty_t < 0) != (ty_d < 0)) fail(PSL_ERR_UNSUPPORTED, "only one of the models has token types");
    if (ty_t >= 0) {
        const int32_t * a = (const int32_t *) gguf_get_arr_data(t->gguf, ty_t);
        const int32_t * b = (const int32_t *) gguf_get_arr_data(d->gguf, ty_d);
        for (size_t i = 0; i < nt && i < gguf_get_arr_n(t->gguf, ty_t) && i < gguf_get_arr_n(d->gguf, ty_d); ++i) {
            if (a[i] != b[i]) {
                fail(PSL_ERR_UNSUPPORTED, "token %zu ('%.40s') has type %d in the target but %d in the draft", i,
                     gguf_get_arr_str(t->gguf, tt, i), a[i], b[i]);
            }
        }
    }
    for (const char * key : {"bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id", "unknown_token_id",
                             "padding_token_id", "add_bos_token", "add_eos_token"}) {
        const int64_t a = special_id(t, key), b = special_id(d, key);
        if (a != b) {
            fail(PSL_ERR_UNSUPPORTED, "special tokens differ: tokenizer.ggml.%s is %lld in the target, %lld in the draft",
                 key, (long long) a, (long long) b);
        }
    }
    const std::string mt = t->file->get_str("tokenizer.ggml.model", ""), md = d->file->get_str("tokenizer.ggml.model", "");
    const std::string pt = t->file->get_str("tokenizer.ggml.pre", ""), pd = d->file->get_str("tokenizer.ggml.pre", "");
    if (mt != md || pt != pd) {
        fail(PSL_ERR_UNSUPPORTED, "tokenizers differ: target %s/%s, draft %s/%s", mt.c_str(), pt.c_str(), md.c_str(),
             pd.c_str());
    }
}

}  // namespace

extern "C" psl_status psl_vocab_compatible(const psl_model * target, const psl_model * draft) {
    return psl::guard([&] {
        if (!target || !draft) fail(PSL_ERR_INVALID_ARGUMENT, "model is NULL");
        check(target, draft);
    });
}
