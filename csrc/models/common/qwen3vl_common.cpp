// Qwen3-VL's text trunk (qwen3vl_common.h).
#include "models/common/qwen3vl_common.h"

#include <algorithm>

namespace psl {

void load_qwen3vl_hparams(const GgufFile & f, const std::string & a, HParams & hp) {
    const char * path = f.path().c_str();
    const int64_t n_ds = f.get_int(a + ".n_deepstack_layers", 0);
    // each slice is added after a layer of the trunk (llama.cpp would index past its last)
    if (n_ds < 0 || n_ds >= hp.n_layer) {
        fail(PSL_ERR_FORMAT, "'%s': n_deepstack_layers %lld is outside [0, %d)", path, (long long) n_ds, hp.n_layer);
    }
    if ((int64_t) hp.n_embd * (1 + n_ds) > (1 << 26)) {   // a row's width stays an int32 (Qwen3-VL's: 16384)
        fail(PSL_ERR_FORMAT, "'%s': rows of %d x %lld values", path, hp.n_embd, (long long) (1 + n_ds));
    }
    hp.n_deepstack = (int32_t) n_ds;
    const std::vector<int64_t> sec = f.get_ints(a + ".rope.dimension_sections");
    if (sec.empty() || sec.size() > 4) {
        fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections needs 1 to 4 entries (got %zu)", path, sec.size());
    }
    int64_t sum = 0;
    for (size_t i = 0; i < sec.size(); ++i) {
        if (sec[i] < 0 || sec[i] > 4096) fail(PSL_ERR_FORMAT, "'%s': bad rope section %lld", path, (long long) sec[i]);
        hp.rope_sections[i] = (int32_t) sec[i];
        sum += sec[i];
    }
    if (sum <= 0 || sum > hp.n_embd_head_k) {   // M-RoPE cycles through the sections: none is no rope
        fail(PSL_ERR_FORMAT, "'%s': rope.dimension_sections must sum to 1..%d (got %lld)", path, hp.n_embd_head_k,
             (long long) sum);
    }
    // llama.cpp asserts both: the whole head is roped, keys and values alike
    if (hp.n_embd_head_k != hp.n_embd_head_v || hp.n_rot != hp.n_embd_head_k) {
        fail(PSL_ERR_FORMAT, "'%s': qwen3vl ropes whole heads of one size (key %d, value %d, rope %d)", path,
             hp.n_embd_head_k, hp.n_embd_head_v, hp.n_rot);
    }
}

void create_qwen3vl_tensors(TensorLoader & tl, psl_model & m, void (*ffn)(TensorLoader &, psl_model &, int)) {
    create_embeddings(tl, m);
    for (int il = 0; il < m.hp.n_layer; ++il) {
        create_attention(tl, m, il, /*bias =*/ false, /*qk_norm =*/ true);
        m.layers[il].ffn_norm = tl.layer(il, "ffn_norm.weight", {m.hp.n_embd});
        ffn(tl, m, il);
    }
}

namespace {

ggml_tensor * attention(Graph & g, int il, ggml_tensor * h) {
    ggml_context * ctx = g.ctx;
    const HParams & hp = g.m.hp;
    const Layer & l = g.m.layers[il];
    const int64_t hd = hp.n_embd_head_k, n = g.n_tokens;
    if (!g.inp_pos4) {
        g.inp_pos4 = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4 * n);
        ggml_set_name(g.inp_pos4, "inp_pos4");
        ggml_set_input(g.inp_pos4);
    }
    ggml_tensor * q = g.rms_norm(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wq, h), hd, hp.n_head, n), l.q_norm);
    ggml_tensor * k = g.rms_norm(ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wk, h), hd, hp.n_head_kv, n), l.k_norm);
    ggml_tensor * v = ggml_reshape_3d(ctx, ggml_mul_mat(ctx, l.wv, h), hd, hp.n_head_kv, n);
    int sections[4];
    std::copy(hp.rope_sections, hp.rope_sections + 4, sections);
    auto rope = [&](ggml_tensor * t) {
        return ggml_rope_multi(ctx, t, g.inp_pos4, nullptr, hp.n_rot, sections, GGML_ROPE_TYPE_IMROPE, hp.n_ctx_train,
                               hp.rope_freq_base, hp.rope_freq_scale, hp.rope_ext_factor, hp.rope_attn_factor,
                               hp.yarn_beta_fast, hp.yarn_beta_slow);
    };
    ggml_tensor * a = g.attention(il, rope(q), rope(k), v, 1.0f / sqrtf((float) hd));
    if (il == hp.n_layer - 1) a = g.keep_outputs(a);   // only the rows that produce logits go on
    return ggml_mul_mat(ctx, l.wo, a);
}

}  // namespace

ggml_tensor * build_qwen3vl(Graph & g, ggml_tensor * (*ffn)(Graph &, const Layer &, ggml_tensor *)) {
    const HParams & hp = g.m.hp;
    ggml_tensor * x = g.embed();
    for (int il = 0; il < hp.n_layer; ++il) {
        const Layer & l = g.m.layers[il];
        g.layer_input(il, x);
        ggml_tensor * a = attention(g, il, g.rms_norm(x, l.attn_norm));
        if (il == hp.n_layer - 1) x = g.keep_outputs(x);
        x = ggml_add(g.ctx, x, a);
        x = ggml_add(g.ctx, x, ffn(g, l, g.rms_norm(x, l.ffn_norm)));
        // a text token's deepstack slices are zero: adding them changes nothing, so only rows do
        if (ggml_tensor * ds = g.deepstack(il)) x = ggml_add(g.ctx, x, ds);
    }
    return g.output(x, g.m.output_norm);
}

}  // namespace psl
