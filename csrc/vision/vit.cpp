// The ViT encoder SigLIP and CLIP share (clip.cpp's build_vit with its defaults): patches by a
// strided convolution, learned positions, pre-norm layers (LayerNorm, attention with biases,
// LayerNorm, MLP), a LayerNorm after the last. Attention as clip.cpp runs it where the backend
// has flash attention (its default): K and V in F16, F32 accumulation.
#include "vision/projector.h"

#include <cmath>

namespace psl {

ggml_tensor * ProjectorGraph::layer_norm(ggml_tensor * x, ggml_tensor * wt, ggml_tensor * b) const {
    x = ggml_norm(ctx, x, hp.eps);
    if (wt) x = ggml_mul(ctx, x, wt);
    return b ? ggml_add(ctx, x, b) : x;
}

ggml_tensor * ProjectorGraph::linear(ggml_tensor * x, ggml_tensor * wt, ggml_tensor * b) const {
    x = ggml_mul_mat(ctx, wt, x);
    return b ? ggml_add(ctx, x, b) : x;
}

ggml_tensor * ProjectorGraph::attention(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, float kq_scale) const {
    const int64_t e = q->ne[0] * q->ne[1], n = q->ne[2];
    q = ggml_permute(ctx, q, 0, 2, 1, 3);                                       // [d_head, n, n_head]
    k = ggml_cast(ctx, ggml_permute(ctx, k, 0, 2, 1, 3), GGML_TYPE_F16);
    v = ggml_cast(ctx, ggml_permute(ctx, v, 0, 2, 1, 3), GGML_TYPE_F16);
    ggml_tensor * a = ggml_flash_attn_ext(ctx, q, k, v, nullptr, kq_scale, 0.0f, 0.0f);
    ggml_prec_set_acc(a, GGML_PREC_F32);
    return ggml_reshape_2d(ctx, a, e, n);                                       // [d_head, n_head, n] -> rows
}

ggml_tensor * ProjectorGraph::vit() {
    const int64_t e = hp.n_embd, n = hp.n_patches(), n_head = hp.n_head, d_head = e / n_head;
    const int p = hp.patch_size;
    // [side, side, n_embd] -> [n_embd, n_patches], patches in row-major order
    ggml_tensor * x = ggml_conv_2d(ctx, w.patch_w, inp_raw, p, p, 0, 0, 1, 1);
    x = ggml_cont(ctx, ggml_transpose(ctx, ggml_reshape_2d(ctx, x, n, e)));
    if (w.patch_b) x = ggml_add(ctx, x, w.patch_b);
    x = ggml_add(ctx, x, w.pos);
    const float kq_scale = 1.0f / sqrtf((float) d_head);
    for (const VitLayer & L : w.layers) {
        ggml_tensor * h = layer_norm(x, L.ln1_w, L.ln1_b);
        ggml_tensor * q = ggml_reshape_3d(ctx, linear(h, L.q_w, L.q_b), d_head, n_head, n);
        ggml_tensor * k = ggml_reshape_3d(ctx, linear(h, L.k_w, L.k_b), d_head, n_head, n);
        ggml_tensor * v = ggml_reshape_3d(ctx, linear(h, L.v_w, L.v_b), d_head, n_head, n);
        x = ggml_add(ctx, linear(attention(q, k, v, kq_scale), L.o_w, L.o_b), x);
        h = linear(layer_norm(x, L.ln2_w, L.ln2_b), L.up_w, L.up_b);
        h = hp.ffn == VitHParams::Ffn::Gelu ? ggml_gelu(ctx, h)
          : hp.ffn == VitHParams::Ffn::Silu ? ggml_silu(ctx, h)
                                            : ggml_gelu_quick(ctx, h);
        x = ggml_add(ctx, x, linear(h, L.down_w, L.down_b));
    }
    return w.post_ln_w ? layer_norm(x, w.post_ln_w, w.post_ln_b) : x;
}

}  // namespace psl
