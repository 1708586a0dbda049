// The C API of the tokenizer ("vocabulary and tokenizer" in pyllamaspec.h).
#include "error.h"
#include "model.h"
#include "pyllamaspec.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"
#include "vocab/vocab_compat.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace psl;

struct psl_detok {
    std::shared_ptr<const Vocab> vocab;
    bool render_special = false;
    bool strip_space = false;   // the first token after an optional BOS loses its leading space
    bool first = true;
    std::string pending;        // bytes of an incomplete UTF-8 sequence
    std::string out;            // what the last call returned
};

namespace {

const Vocab & vocab_of(const psl_model * m) {
    if (!m) fail(PSL_ERR_INVALID_ARGUMENT, "model is NULL");
    if (!m->vocab) {
        if (m->arch && m->file->get_str("tokenizer.ggml.model", "") != "") {
            fail(PSL_ERR_NO_VOCAB, "this model was loaded without its tokenizer (load_vocab / tokenizer=False)");
        }
        fail(PSL_ERR_NO_VOCAB, "the model file has no tokenizer (no tokenizer.ggml.model key)");
    }
    return *m->vocab;
}

void check_id(const Vocab & v, int32_t id) {
    if (!v.valid(id)) fail(PSL_ERR_OUT_OF_RANGE, "token id %d is outside the vocabulary [0, %d)", id, v.n_tokens());
}

// Copies ids into the caller's buffer, or says how many are needed.
void put_ids(const std::vector<token_id> & ids, int32_t * out, int32_t cap, int32_t * n_out) {
    if (ids.size() > (size_t) INT32_MAX) fail(PSL_ERR_INVALID_ARGUMENT, "too many tokens (%zu)", ids.size());
    if (n_out) *n_out = (int32_t) ids.size();
    if (cap < 0) fail(PSL_ERR_INVALID_ARGUMENT, "cap must be >= 0, got %d", cap);
    if ((size_t) cap < ids.size()) {
        fail(PSL_ERR_BUFFER_TOO_SMALL, "%zu tokens do not fit in a buffer of %d", ids.size(), cap);
    }
    if (!ids.empty()) {
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "output buffer is NULL");
        std::memcpy(out, ids.data(), ids.size() * sizeof(int32_t));
    }
}

void put_bytes(std::string_view s, char * buf, size_t cap, size_t * n_out) {
    if (n_out) *n_out = s.size();
    if (cap < s.size()) fail(PSL_ERR_BUFFER_TOO_SMALL, "%zu bytes do not fit in a buffer of %zu", s.size(), cap);
    if (!s.empty()) {
        if (!buf) fail(PSL_ERR_INVALID_ARGUMENT, "output buffer is NULL");
        std::memcpy(buf, s.data(), s.size());
    }
}

void set_out(psl_detok * d, const char ** text, size_t * len) {
    if (text) *text = d->out.c_str();
    if (len) *len = d->out.size();
}

}  // namespace

extern "C" {

psl_status psl_vocab_load(const char * path, psl_model ** out) {
    return guard([&] {
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        if (!path) fail(PSL_ERR_INVALID_ARGUMENT, "path is NULL");
        auto m = std::make_unique<psl_model>();
        m->files = std::make_unique<GgufSplit>(path, /*all_shards =*/ false);   // the tokenizer is in the first
        m->file = &m->files->first();
        m->gguf = m->file->gguf();
        m->arch_name = m->file->get_str("general.architecture", "");
        m->name = m->file->get_str("general.name", "");
        m->vocab = load_vocab(m->gguf);
        if (!m->vocab) fail(PSL_ERR_NO_VOCAB, "'%s' has no tokenizer (no tokenizer.ggml.model key)", path);
        m->hp.n_vocab = m->vocab->n_tokens();
        *out = m.release();   // arch stays null: a vocabulary-only model
    });
}

psl_status psl_vocab_get_info(const psl_model * model, psl_vocab_info * out) {
    return guard([&] {
        const Vocab & v = vocab_of(model);
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        std::memset(out, 0, sizeof(*out));
        out->type = v.type == Vocab::Type::SPM ? PSL_VOCAB_SPM : PSL_VOCAB_BPE;
        out->n_tokens = v.n_tokens();
        out->bos = v.bos;
        out->eos = v.eos;
        out->eot = v.eot;
        out->eom = v.eom;
        out->unk = v.unk;
        out->pad = v.pad;
        out->sep = v.sep;
        out->nl = v.nl;
        out->add_bos = v.add_bos;
        out->add_eos = v.add_eos;
        out->add_space_prefix = v.add_space_prefix;
        const size_t n = std::min(sizeof(out->pre) - 1, v.pre.size());
        std::memcpy(out->pre, v.pre.data(), n);
        out->pre[n] = '\0';
    });
}

psl_status psl_tokenize(const psl_model * model, const char * text, size_t len, bool add_special, bool parse_special,
                        int32_t * out, int32_t cap, int32_t * n_out) {
    return guard([&] {
        const Vocab & v = vocab_of(model);
        if (!text && len > 0) fail(PSL_ERR_INVALID_ARGUMENT, "text is NULL");
        std::vector<token_id> ids;
        ids.reserve(len / 3 + 4);
        v.tokenize(std::string_view(text ? text : "", len), add_special, parse_special, ids);
        put_ids(ids, out, cap, n_out);
    });
}

psl_status psl_token_to_piece(const psl_model * model, int32_t id, bool render_special, char * buf, size_t cap,
                              size_t * n_out) {
    return guard([&] {
        const Vocab & v = vocab_of(model);
        check_id(v, id);
        put_bytes(v.piece(id, render_special), buf, cap, n_out);
    });
}

psl_status psl_detokenize(const psl_model * model, const int32_t * ids, int32_t n, bool render_special, char * buf,
                          size_t cap, size_t * n_out) {
    return guard([&] {
        const Vocab & v = vocab_of(model);
        if (n < 0) fail(PSL_ERR_INVALID_ARGUMENT, "n must be >= 0, got %d", n);
        if (n > 0 && !ids) fail(PSL_ERR_INVALID_ARGUMENT, "ids is NULL");
        for (int32_t i = 0; i < n; ++i) {
            if (!v.valid(ids[i])) {
                fail(PSL_ERR_OUT_OF_RANGE, "token id %d at index %d is outside the vocabulary [0, %d)", ids[i], i,
                     v.n_tokens());
            }
        }
        std::string s;
        v.detokenize(ids, (size_t) n, render_special, s);
        put_bytes(s, buf, cap, n_out);
    });
}

psl_status psl_token_get_attr(const psl_model * model, int32_t id, int32_t * attr, float * score) {
    return guard([&] {
        const Vocab & v = vocab_of(model);
        check_id(v, id);
        if (attr) *attr = v.effective_type(id);
        if (score) *score = v.data(id).score;
    });
}

bool psl_token_is_eog(const psl_model * model, int32_t id) {
    if (!model || !model->vocab) return false;
    return model->vocab->valid(id) && model->vocab->is_eog(id);
}

psl_status psl_vocab_eog_tokens(const psl_model * model, int32_t * out, int32_t cap, int32_t * n_out) {
    return guard([&] {
        if (!model || !n_out || (cap > 0 && !out)) fail(PSL_ERR_INVALID_ARGUMENT, "model, out or n_out is NULL");
        const auto & eog = vocab_of(model).eog_tokens();
        *n_out = (int32_t) eog.size();
        if ((int32_t) eog.size() > cap) fail(PSL_ERR_BUFFER_TOO_SMALL, "%zu end-of-generation tokens, room for %d", eog.size(), cap);
        std::copy(eog.begin(), eog.end(), out);
    });
}

psl_status psl_detok_new(const psl_model * model, bool render_special, psl_detok ** out) {
    return guard([&] {
        if (!out) fail(PSL_ERR_INVALID_ARGUMENT, "out is NULL");
        *out = nullptr;
        vocab_of(model);
        auto d = std::make_unique<psl_detok>();
        d->vocab = model->vocab;
        d->render_special = render_special;
        d->strip_space = model->vocab->add_space_prefix;
        *out = d.release();
    });
}

psl_status psl_detok_push(psl_detok * d, int32_t id, const char ** text, size_t * len) {
    return guard([&] {
        if (!d) fail(PSL_ERR_INVALID_ARGUMENT, "detokenizer is NULL");
        const Vocab & v = *d->vocab;
        check_id(v, id);
        std::string_view p = v.piece(id, d->render_special);
        if (d->strip_space && !(d->first && id == v.bos)) {
            if (!p.empty() && p[0] == ' ') p.remove_prefix(1);
            d->strip_space = false;
        }
        d->first = false;
        d->pending.append(p.data(), p.size());
        const size_t k = unicode::utf8_complete_prefix(d->pending.data(), d->pending.size());
        d->out.assign(d->pending, 0, k);
        d->pending.erase(0, k);
        set_out(d, text, len);
    });
}

psl_status psl_detok_flush(psl_detok * d, const char ** text, size_t * len) {
    return guard([&] {
        if (!d) fail(PSL_ERR_INVALID_ARGUMENT, "detokenizer is NULL");
        d->out.swap(d->pending);
        d->pending.clear();
        set_out(d, text, len);
    });
}

void psl_detok_free(psl_detok * d) { delete d; }

psl_status psl_pretokenize(const char * pre, const char * text, size_t len, int32_t * ends, int32_t cap, int32_t * n_out) {
    return guard([&] {
        if (!pre) fail(PSL_ERR_INVALID_ARGUMENT, "pre is NULL");
        if (!text && len > 0) fail(PSL_ERR_INVALID_ARGUMENT, "text is NULL");
        if (len >= UINT32_MAX / 4) fail(PSL_ERR_INVALID_ARGUMENT, "text too long (%zu bytes)", len);
        const auto p = PreTokenizer::create(pre);
        std::string encoded;
        std::vector<uint32_t> e;
        p->split(std::string_view(text ? text : "", len), encoded, e);
        std::vector<token_id> ids(e.begin(), e.end());
        put_ids(ids, ends, cap, n_out);
    });
}

psl_status psl_vocab_compatible(const psl_model * target, const psl_model * draft) {
    return guard([&] {
        if (!target || !draft) fail(PSL_ERR_INVALID_ARGUMENT, "model is NULL");
        if ((!target->arch && !target->stub) || (!draft->arch && !draft->stub)) {
            fail(PSL_ERR_INVALID_ARGUMENT, "both models must be loaded with their weights");
        }
        check_vocab_compatible(*target->file, target->hp.n_vocab, *draft->file, draft->hp.n_vocab);
    });
}

psl_status psl_vocab_draft_ids(const psl_model * m, int32_t n, int32_t * out, int32_t * n_out) {
    return guard([&] {
        if (!m || !n_out || (n > 0 && !out)) fail(PSL_ERR_INVALID_ARGUMENT, "model, out or n_out is NULL");
        if (n < 0) fail(PSL_ERR_INVALID_ARGUMENT, "n must be >= 0 (got %d)", n);
        const std::vector<int32_t> ids = draft_head_ids(*m->file, m->hp.n_vocab, n);
        *n_out = (int32_t) ids.size();
        std::copy(ids.begin(), ids.end(), out);
    });
}

}  // extern "C"
