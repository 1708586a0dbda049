// The ViT encoder SigLIP and CLIP share (clip.cpp's build_vit with its defaults): patches by a
// strided convolution, learned positions, pre-norm layers (LayerNorm, attention with biases,
// LayerNorm, MLP), a LayerNorm after the last. Attention as clip.cpp runs it where the backend
// has flash attention (its default): K and V in F16, F32 accumulation. Also the pieces the Qwen
// encoders share (qwen2vl.cpp, qwen3vl.cpp): two temporal patch kernels, mtmd's 2 x 2 patch
// order, the 2-D vision rope and its positions.
#include "vision/projector.h"

#include "error.h"

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

ggml_tensor * ProjectorGraph::vit() {
    const int64_t e = hp.n_embd, n = hp.n_patches(), n_head = hp.n_head, d_head = e / n_head;
    const int p = hp.patch_size;
    // [side, side, n_embd] -> [n_embd, n_patches], patches in row-major order
    ggml_tensor * x = ggml_conv_2d(ctx, w.patch_w, inp_raw, p, p, 0, 0, 1, 1);
    x = ggml_cont(ctx, ggml_transpose(ctx, ggml_reshape_2d(ctx, x, n, e)));
    if (w.patch_b) x = ggml_add(ctx, x, w.patch_b);
    x = ggml_add(ctx, x, w.pos);
    for (const VitLayer & L : w.layers) {
        ggml_tensor * h = layer_norm(x, L.ln1_w, L.ln1_b);
        ggml_tensor * q = ggml_reshape_3d(ctx, linear(h, L.q_w, L.q_b), d_head, n_head, n);
        ggml_tensor * k = ggml_reshape_3d(ctx, linear(h, L.k_w, L.k_b), d_head, n_head, n);
        ggml_tensor * v = ggml_reshape_3d(ctx, linear(h, L.v_w, L.v_b), d_head, n_head, n);
        x = ggml_add(ctx, linear(attention(q, k, v, nullptr), L.o_w, L.o_b), x);
        h = linear(layer_norm(x, L.ln2_w, L.ln2_b), L.up_w, L.up_b);
        h = hp.ffn == VitHParams::Ffn::Gelu ? ggml_gelu(ctx, h)
          : hp.ffn == VitHParams::Ffn::Silu ? ggml_silu(ctx, h)
                                            : ggml_gelu_quick(ctx, h);
        x = ggml_add(ctx, x, linear(h, L.down_w, L.down_b));
    }
    return w.post_ln_w ? layer_norm(x, w.post_ln_w, w.post_ln_b) : x;
}

ggml_tensor * ProjectorGraph::attention(ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                                        float kq_scale) const {
    const int64_t d = q->ne[0], n_head = q->ne[1], n = q->ne[2];
    q = ggml_permute(ctx, q, 0, 2, 1, 3);                                       // [d_head, n, n_head]
    k = ggml_cast(ctx, ggml_permute(ctx, k, 0, 2, 1, 3), GGML_TYPE_F16);
    v = ggml_cast(ctx, ggml_permute(ctx, v, 0, 2, 1, 3), GGML_TYPE_F16);
    ggml_tensor * a = ggml_flash_attn_ext(ctx, q, k, v, mask, kq_scale > 0.0f ? kq_scale : 1.0f / sqrtf((float) d),
                                          0.0f, 0.0f);
    ggml_prec_set_acc(a, GGML_PREC_F32);
    return ggml_reshape_2d(ctx, a, d * n_head, n);                                // [d_head, n_head, n] -> rows
}

ggml_tensor * ProjectorGraph::merge_order(ggml_tensor * x, int64_t px, int64_t py) const {
    const int64_t e = x->ne[0];
    x = ggml_cont_4d(ctx, x, e * 2, px / 2, py, 1);
    x = ggml_reshape_4d(ctx, x, e * 2, px / 2, 2, py / 2);
    x = ggml_permute(ctx, x, 0, 2, 1, 3);
    return ggml_cont_2d(ctx, x, e, px * py);
}

ggml_tensor * ProjectorGraph::temporal_patches(int64_t px, int64_t py) {
    const int p = hp.patch_size;
    ggml_tensor * x = ggml_add(ctx, ggml_conv_2d(ctx, w.patch_w, inp_raw, p, p, 0, 0, 1, 1),
                               ggml_conv_2d(ctx, w.patch_w1, inp_raw, p, p, 0, 0, 1, 1));   // [px, py, e]
    return merge_order(ggml_permute(ctx, x, 1, 2, 0, 3), px, py);
}

ggml_tensor * ProjectorGraph::rope_positions(int64_t px, int64_t py, const std::vector<int32_t> * slot) {
    const int64_t n = px * py;
    std::vector<int32_t> v((size_t) (4 * n));
    int64_t i = 0;
    for (int64_t y = 0; y < py; y += 2) {
        for (int64_t x = 0; x < px; x += 2) {
            for (int64_t dy = 0; dy < 2; ++dy) {
                for (int64_t dx = 0; dx < 2; ++dx, ++i) {
                    const int64_t r = slot ? 4 * (int64_t) (*slot)[(size_t) (i / 4)] + i % 4 : i;
                    v[(size_t) r] = v[(size_t) (2 * n + r)] = (int32_t) (y + dy);
                    v[(size_t) (n + r)] = v[(size_t) (3 * n + r)] = (int32_t) (x + dx);
                }
            }
        }
    }
    ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, 4 * n);
    ggml_set_input(t);
    inputs_i32.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor * ProjectorGraph::vision_rope(ggml_tensor * x, ggml_tensor * pos) const {
    const int d = (int) x->ne[0];
    int sections[GGML_MROPE_SECTIONS] = {d / 4, d / 4, d / 4, d / 4};
    return ggml_rope_multi(ctx, x, pos, nullptr, d / 2, sections, GGML_ROPE_TYPE_VISION, 32768, 10000.0f, 1.0f, 0.0f,
                           1.0f, 32.0f, 1.0f);
}

void grid_2x2(const VitHParams & hp, int64_t width, int64_t height, int64_t most_patches, int32_t & nx, int32_t & ny) {
    constexpr int64_t kMostSide = 1 << 14;   // pixels a side (mtmd's limits are far below)
    const int64_t unit = (int64_t) hp.patch_size * 2;
    if (width <= 0 || height <= 0 || width > kMostSide || height > kMostSide || width % unit || height % unit) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the projector takes images whose sides are positive multiples of %lld "
             "pixels (patch_size %d x merge 2), at most %lld; got %lldx%lld", (long long) unit, hp.patch_size,
             (long long) kMostSide, (long long) width, (long long) height);
    }
    const int64_t n = (width / hp.patch_size) * (height / hp.patch_size);
    if (n > most_patches) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a %lldx%lld image is %lld patches, over the %lld the encoder takes",
             (long long) width, (long long) height, (long long) n, (long long) most_patches);
    }
    nx = (int32_t) (width / unit);
    ny = (int32_t) (height / unit);
}

}  // namespace psl
