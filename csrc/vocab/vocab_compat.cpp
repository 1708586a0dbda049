// A draft and its target's vocabulary, on the GGUF tokenizer arrays (what is checked:
// vocab_compat.h).
#include "vocab/vocab_compat.h"

#include "error.h"

#include "gguf.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace psl {

namespace {

int64_t find_arr(const gguf_context * g, const char * key, gguf_type type) {
    const int64_t i = gguf_find_key(g, key);
    if (i < 0 || gguf_get_kv_type(g, i) != GGUF_TYPE_ARRAY || gguf_get_arr_type(g, i) != type) return -1;
    return i;
}

int64_t special_id(const GgufFile & f, const char * key) {
    const std::string k = std::string("tokenizer.ggml.") + key;
    return f.get_int(k, -1);
}

// First code point of UTF-8 text (U+2581, SentencePiece's space, read as a space), and whether
// the text is that one code point only.
bool single_code_point(const char * s, uint32_t & cp) {
    const auto * u = (const unsigned char *) s;
    const size_t n = strlen(s);
    if (n == 0) return false;
    const size_t len = u[0] < 0x80 ? 1 : (u[0] >> 5) == 6 ? 2 : (u[0] >> 4) == 14 ? 3 : (u[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || len != n) return false;
    cp = len == 1 ? u[0] : u[0] & (0x7f >> len);
    for (size_t i = 1; i < len; ++i) cp = (cp << 6) | (u[i] & 0x3f);
    if (cp == 0x2581) cp = ' ';
    return true;
}

}  // namespace

void check_vocab_compatible(const GgufFile & t, int32_t n_vocab_target, const GgufFile & d, int32_t n_vocab_draft) {
    if (n_vocab_target != n_vocab_draft) {
        const bool tbig = n_vocab_target > n_vocab_draft;
        fail(PSL_ERR_UNSUPPORTED,
             "vocabularies differ in size: the target has %d ids, the draft %d; ids %d..%d exist only in the %s",
             n_vocab_target, n_vocab_draft, tbig ? n_vocab_draft : n_vocab_target,
             (tbig ? n_vocab_target : n_vocab_draft) - 1, tbig ? "target" : "draft");
    }
    const int64_t tt = find_arr(t.gguf(), "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    const int64_t dt = find_arr(d.gguf(), "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    if (tt < 0 || dt < 0) {
        fail(PSL_ERR_NO_VOCAB, "the %s has no tokenizer.ggml.tokens: cannot check that the vocabularies match",
             tt < 0 ? "target" : "draft");
    }
    const size_t nt = gguf_get_arr_n(t.gguf(), tt), nd = gguf_get_arr_n(d.gguf(), dt);
    if (nt != nd) {
        fail(PSL_ERR_UNSUPPORTED, "tokenizers differ in size: the target has %zu tokens, the draft %zu; ids %zu..%zu "
             "exist only in the %s", nt, nd, std::min(nt, nd), std::max(nt, nd) - 1, nt > nd ? "target" : "draft");
    }
    for (size_t i = 0; i < nt; ++i) {
        const char * a = gguf_get_arr_str(t.gguf(), tt, i);
        const char * b = gguf_get_arr_str(d.gguf(), dt, i);
        if (strcmp(a, b) != 0) {
            fail(PSL_ERR_UNSUPPORTED, "vocabularies differ at id %zu: the target has '%.40s', the draft '%.40s'", i, a, b);
        }
    }
    const int64_t ty_t = find_arr(t.gguf(), "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
    const int64_t ty_d = find_arr(d.gguf(), "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
    if ((ty_t < 0) != (ty_d < 0)) fail(PSL_ERR_UNSUPPORTED, "only one of the models has token types");
    if (ty_t >= 0) {
        const int32_t * a = (const int32_t *) gguf_get_arr_data(t.gguf(), ty_t);
        const int32_t * b = (const int32_t *) gguf_get_arr_data(d.gguf(), ty_d);
        for (size_t i = 0; i < nt && i < gguf_get_arr_n(t.gguf(), ty_t) && i < gguf_get_arr_n(d.gguf(), ty_d); ++i) {
            if (a[i] != b[i]) {
                fail(PSL_ERR_UNSUPPORTED, "token %zu ('%.40s') has type %d in the target but %d in the draft", i,
                     gguf_get_arr_str(t.gguf(), tt, i), a[i], b[i]);
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
    const std::string mt = t.get_str("tokenizer.ggml.model", ""), md = d.get_str("tokenizer.ggml.model", "");
    const std::string pt = t.get_str("tokenizer.ggml.pre", ""), pd = d.get_str("tokenizer.ggml.pre", "");
    if (mt != md || pt != pd) {
        fail(PSL_ERR_UNSUPPORTED, "tokenizers differ: target %s/%s, draft %s/%s", mt.c_str(), pt.c_str(), md.c_str(),
             pd.c_str());
    }
}


std::vector<int32_t> draft_head_ids(const GgufFile & f, int32_t n_vocab, int32_t n) {
    const gguf_context * g = f.gguf();
    const int64_t kt = find_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING);
    if (kt < 0) fail(PSL_ERR_NO_VOCAB, "the model has no tokenizer.ggml.tokens");
    const int32_t nv = n_vocab;
    if ((int64_t) gguf_get_arr_n(g, kt) < nv) fail(PSL_ERR_FORMAT, "fewer token texts than logits");
    const int64_t ks = find_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32);
    const int64_t ky = find_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32);
    const float * score = ks >= 0 && (int64_t) gguf_get_arr_n(g, ks) >= nv ? (const float *) gguf_get_arr_data(g, ks) : nullptr;
    const int32_t * type = ky >= 0 && (int64_t) gguf_get_arr_n(g, ky) >= nv ? (const int32_t *) gguf_get_arr_data(g, ky) : nullptr;

    // Always: control, user-defined and byte tokens, and the single characters below U+2500
    // (digits, punctuation, Latin, Greek, Cyrillic), which BPE vocabularies keep apart from
    // the merges, often last. Then the merges in their order: a BPE merge's rank (its score
    // in SentencePiece-style files, else its id) follows how common it was in training.
    std::vector<int32_t> ids, rest;
    for (int32_t i = 0; i < nv; ++i) {
        uint32_t cp = 0;
        const bool special = type && (type[i] == 3 || type[i] == 4 || type[i] == 6);
        const bool basic = single_code_point(gguf_get_arr_str(g, kt, i), cp) && cp < 0x2500;
        (special || basic ? ids : rest).push_back(i);
    }
    if (score) {
        std::stable_sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) { return score[a] > score[b]; });
    }
    const size_t want = std::min<size_t>((size_t) n, (size_t) nv);
    for (size_t i = 0; ids.size() < want && i < rest.size(); ++i) ids.push_back(rest[i]);
    if (ids.size() > want) ids.resize(want);   // n below the always-kept set: the lowest ids
    std::sort(ids.begin(), ids.end());
    return ids;
}

}  // namespace psl
