// What the draft heads (eagle3.cpp, dflash.cpp) share: the target layers they read, the
// draft-to-target vocabulary table, and the target's embeddings and head when they have none.
#include "models/common/arch_common.h"

#include "gguf.h"

#include <cstring>

namespace psl {

void load_head_layers(const GgufFile & f, const std::string & a, HParams & hp) {
    const std::vector<int64_t> ids = f.get_ints(a + ".target_layers");
    if (ids.empty()) fail(PSL_ERR_FORMAT, "'%s': a %s head needs %s.target_layers", f.path().c_str(), a.c_str(), a.c_str());
    if (ids.size() > 64) fail(PSL_ERR_FORMAT, "'%s': %zu target layers (at most 64)", f.path().c_str(), ids.size());
    for (int64_t id : ids) {
        if (id < 0 || id > 4096) fail(PSL_ERR_FORMAT, "'%s': bad target layer id %lld", f.path().c_str(), (long long) id);
        hp.head.target_layers.push_back((int32_t) id);
    }
}

// d2t: an I64 table of absolute target token ids, one per row of the head's output.
void load_d2t(psl_model & m) {
    const TensorSource * src = m.files->find("d2t");
    if (!src) return;
    const ggml_tensor * t = src->meta;
    const char * path = src->file->path().c_str();
    if (t->type != GGML_TYPE_I64 || ggml_n_dims(t) != 1) {
        fail(PSL_ERR_FORMAT, "'%s': d2t must be a 1-D I64 table of target token ids (got type %s)", path,
             ggml_type_name(t->type));
    }
    std::vector<int64_t> ids((size_t) t->ne[0]);
    src->file->read(src->offset, ids.data(), ids.size() * sizeof(int64_t));
    std::vector<uint8_t> seen((size_t) m.hp.n_vocab, 0);
    m.hp.head.d2t.resize(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= m.hp.n_vocab || seen[(size_t) ids[i]]++) {
            fail(PSL_ERR_FORMAT, "'%s': d2t row %zu maps to %lld: not a distinct id of the %d-token vocabulary",
                 path, i, (long long) ids[i], m.hp.n_vocab);
        }
        m.hp.head.d2t[i] = (int32_t) ids[i];
    }
}

int64_t head_vocab(const psl_model & m) {
    return m.hp.head.d2t.empty() ? m.hp.n_vocab : (int64_t) m.hp.head.d2t.size();
}

ggml_tensor * head_tok_embd(const Graph & g) {
    if (g.m.tok_embd) return g.m.tok_embd;
    if (!g.other || !g.other->tok_embd) fail(PSL_ERR_INTERNAL, "a draft head without embeddings has no target");
    return g.other->tok_embd;
}

ggml_tensor * head_output(const Graph & g) {
    if (g.m.output) return g.m.output;
    if (!g.other || !g.other->output) fail(PSL_ERR_INTERNAL, "a draft head without an output head has no target");
    return g.other->output;
}

ggml_tensor * head_input(Graph & g, int64_t width) {
    g.inp_embd = ggml_new_tensor_2d(g.ctx, GGML_TYPE_F32, width, g.n_tokens);
    ggml_set_name(g.inp_embd, "inp_embd");
    ggml_set_input(g.inp_embd);
    return g.inp_embd;
}

ggml_tensor * head_tokens(Graph & g) {
    g.inp_tokens = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, g.n_tokens);
    ggml_set_name(g.inp_tokens, "inp_tokens");
    ggml_set_input(g.inp_tokens);
    return ggml_get_rows(g.ctx, head_tok_embd(g), g.inp_tokens);
}

}  // namespace psl
