// The weights most architectures share: embeddings and output head, the attention projections,
// the gated FFN (an architecture file creates the rest of its layer itself).
#include "models/common/arch_common.h"

namespace psl {

void create_embeddings(TensorLoader & tl, psl_model & m) {
    const int64_t n_embd = m.hp.n_embd, n_vocab = m.hp.n_vocab;
    m.tok_embd = tl.create("token_embd.weight", {n_embd, n_vocab}, Place::Input);
    m.output_norm = tl.create("output_norm.weight", {n_embd}, Place::Output);
    m.output = tl.matrix("output.weight", {n_embd, n_vocab}, Place::Output, -1, /*required =*/ false);
    if (!m.output) {
        m.tied_output = true;
        // The head gets its own copy of the embeddings where that copy differs from them: on a
        // GPU, or repacked for faster CPU kernels; otherwise it reads them in place.
        m.output = tl.home("token_embd.weight", Place::Output, -1, true) != tl.home("token_embd.weight", Place::Input)
                       ? tl.matrix("token_embd.weight", {n_embd, n_vocab}, Place::Output)
                       : m.tok_embd;
    }
}

void create_attention(TensorLoader & tl, psl_model & m, int il, bool bias, bool qk_norm) {
    const HParams & hp = m.hp;
    const int64_t n_embd = hp.n_embd;
    const int64_t n_q = (int64_t) hp.n_embd_head_k * hp.n_head;
    Layer & l = m.layers[il];
    l.attn_norm = tl.layer(il, "attn_norm.weight", {n_embd});
    l.wq = tl.layer_matrix(il, "attn_q.weight", {n_embd, n_q});
    l.wk = tl.layer_matrix(il, "attn_k.weight", {n_embd, hp.n_embd_k_gqa()});
    l.wv = tl.layer_matrix(il, "attn_v.weight", {n_embd, hp.n_embd_v_gqa()});
    l.wo = tl.layer_matrix(il, "attn_output.weight", {(int64_t) hp.n_embd_head_v * hp.n_head, n_embd});
    if (bias) {
        l.bq = tl.layer(il, "attn_q.bias", {n_q});
        l.bk = tl.layer(il, "attn_k.bias", {hp.n_embd_k_gqa()});
        l.bv = tl.layer(il, "attn_v.bias", {hp.n_embd_v_gqa()});
    }
    if (qk_norm) {
        l.q_norm = tl.layer(il, "attn_q_norm.weight", {hp.n_embd_head_k});
        l.k_norm = tl.layer(il, "attn_k_norm.weight", {hp.n_embd_head_k});
    }
}

void create_ffn(TensorLoader & tl, psl_model & m, int il) {
    const int64_t n_embd = m.hp.n_embd, n_ff = m.hp.ff_length(il);
    if (n_ff <= 0) {
        fail(PSL_ERR_FORMAT, "'%s': %s.feed_forward_length is missing or 0, and layer %d has a dense FFN",
             m.file->path().c_str(), m.arch_name.c_str(), il);
    }
    Layer & l = m.layers[il];
    l.ffn_norm = tl.layer(il, "ffn_norm.weight", {n_embd});
    l.ffn_gate = tl.layer_matrix(il, "ffn_gate.weight", {n_embd, n_ff});
    l.ffn_up = tl.layer_matrix(il, "ffn_up.weight", {n_embd, n_ff});
    l.ffn_down = tl.layer_matrix(il, "ffn_down.weight", {n_ff, n_embd});
}

}  // namespace psl
