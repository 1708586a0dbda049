// Qwen3-VL / Qwen3.5's projector (clip.projector_type "qwen3vl_merger"), as llama.cpp b11434's
// tools/mtmd (clip.cpp's hparams and tensors, models/qwen3vl.cpp's graph) runs it on a still
// image: the Conv3D's two temporal kernels applied and summed, plus a bias; patches taken 2 x 2
// at a time (each merged row's four patches adjacent); learned positions resized bilinearly
// (align corners) to the image's grid; pre-norm LayerNorm blocks with fused qkv, 2-D rope
// (ggml_rope_multi, vision mode) and a GELU MLP; post_ln; 2 x 2 patches concatenated -> mm.0,
// GELU, mm.2. Rectangles: the smart resize's size, multiples of 2 * patch_size. The text model
// places the rows at 2-D M-RoPE positions. Deepstack (Qwen3-VL): a layer with v.deepstack.{il}.*
// tensors (clip.cpp counts them, not clip.vision.is_deepstack_layers) puts its output's 2 x 2
// patches through a merger of its own (LayerNorm, fc1, GELU, fc2), concatenated after the main
// merger's row in layer order: rows n_embd_text * (1 + n_deepstack) wide, for qwen3vl text models.
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

#include <cmath>

namespace psl {

namespace {

constexpr int32_t kMerge = 2;               // qwen3vl.cpp's reshapes hard-code 2 x 2
constexpr int64_t kMostSide = 1 << 14;      // pixels a side (mtmd's limits are far below)
constexpr int64_t kMostPatches = 1 << 16;   // patches an image: the attention is n x n

void hparams(const GgufFile & f, VitHParams & hp) {
    const int64_t merge = f.get_int("clip.vision.spatial_merge_size", kMerge);
    if (merge != kMerge) {
        fail(PSL_ERR_UNSUPPORTED, "'%s': spatial_merge_size %lld (qwen3vl_merger merges 2 x 2 patches)",
             f.path().c_str(), (long long) merge);
    }
    hp.n_merge = kMerge;
    if ((hp.n_embd / hp.n_head) % 4 != 0) {
        fail(PSL_ERR_FORMAT, "'%s': the head size %d is not a multiple of 4 (the vision rope's 4 sections)",
             f.path().c_str(), hp.n_embd / hp.n_head);
    }
    const int64_t side = hp.patches_side();
    if (side * side > kMostPatches) fail(PSL_ERR_FORMAT, "'%s': %lld position embeddings", f.path().c_str(),
                                         (long long) (side * side));
}

// The deepstack mergers: a layer has one where its fc1 is there (as clip.cpp decides); the norm
// and fc2 are then required, the biases optional.
void deepstack_tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    const int64_t e4 = 4 * hp.n_embd, n_text = hp.n_embd_text;
    hp.n_deepstack = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        VitLayer & L = w.layers[(size_t) il];
        const std::string d = "v.deepstack." + std::to_string(il) + ".";
        L.ds_fc1_w = l.get(d + "fc1.weight", {e4, e4}, false);
        if (!L.ds_fc1_w) continue;
        L.ds_fc1_b = l.get(d + "fc1.bias", {e4}, false);
        L.ds_norm_w = l.get(d + "norm.weight", {e4});
        L.ds_norm_b = l.get(d + "norm.bias", {e4}, false);
        L.ds_fc2_w = l.get(d + "fc2.weight", {e4, n_text});
        L.ds_fc2_b = l.get(d + "fc2.bias", {n_text}, false);
        ++hp.n_deepstack;
    }
}

void tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    const int64_t e = hp.n_embd, p = hp.patch_size, e4 = 4 * hp.n_embd;
    w.patch_w = l.get_plain("v.patch_embd.weight", {p, p, 3, e});
    w.patch_w1 = l.get_plain("v.patch_embd.weight.1", {p, p, 3, e});
    w.patch_b = l.get("v.patch_embd.bias", {e});
    w.pos = l.get("v.position_embd.weight", {e, hp.n_patches()});
    vit_norms(l, w, hp);
    for (int il = 0; il < hp.n_layer; ++il) {
        VitLayer & L = w.layers[(size_t) il];
        const std::string b = "v.blk." + std::to_string(il) + ".";
        L.qkv_w = l.get(b + "attn_qkv.weight", {e, 3 * e});
        L.qkv_b = l.get(b + "attn_qkv.bias", {3 * e});
        L.o_w = l.get(b + "attn_out.weight", {e, e});
        L.o_b = l.get(b + "attn_out.bias", {e}, false);
        L.up_w = l.get(b + "ffn_up.weight", {e, hp.n_ff});
        L.up_b = l.get(b + "ffn_up.bias", {hp.n_ff}, false);
        L.down_w = l.get(b + "ffn_down.weight", {hp.n_ff, e});
        L.down_b = l.get(b + "ffn_down.bias", {e}, false);
    }
    w.mm0_w = l.get("mm.0.weight", {e4, e4});
    w.mm0_b = l.get("mm.0.bias", {e4}, false);
    const int64_t n_text = l.meta("mm.2.weight")->ne[1];
    if (n_text <= 0 || n_text > (1 << 20)) fail(PSL_ERR_FORMAT, "projection to a width of %lld", (long long) n_text);
    hp.n_embd_text = (int32_t) n_text;
    w.mm2_w = l.get("mm.2.weight", {e4, n_text});
    w.mm2_b = l.get("mm.2.bias", {n_text}, false);
    deepstack_tensors(l, w, hp);
}

// [n_embd, px, py] (patches in raster order) -> [n_embd, px * py] with each 2 x 2 block's
// patches adjacent, row by row (mtmd's order: the merger then concatenates 4 neighbours).
ggml_tensor * merge_order(ggml_context * ctx, ggml_tensor * x, int64_t e, int64_t px, int64_t py) {
    x = ggml_cont_4d(ctx, x, e * 2, px / 2, py, 1);
    x = ggml_reshape_4d(ctx, x, e * 2, px / 2, 2, py / 2);
    x = ggml_permute(ctx, x, 0, 2, 1, 3);
    return ggml_cont_2d(ctx, x, e, px * py);
}

// The learned positions (a square grid) resized to px x py: [n_embd, px, py].
ggml_tensor * positions_embd(ProjectorGraph & g, int64_t px, int64_t py) {
    const int64_t e = g.hp.n_embd, side = g.hp.patches_side();
    ggml_tensor * pos = ggml_reshape_3d(g.ctx, g.w.pos, e, side, side);
    if (px == side && py == side) return pos;
    pos = ggml_permute(g.ctx, pos, 2, 0, 1, 3);                                 // [side, side, e]
    pos = ggml_interpolate(g.ctx, pos, px, py, e, 1, GGML_SCALE_MODE_BILINEAR | GGML_SCALE_FLAG_ALIGN_CORNERS);
    return ggml_permute(g.ctx, pos, 1, 2, 0, 3);                                // [e, px, py]
}

// Each patch's (y, x, y, x) in the merge order, as the rope's 4 sections read them.
ggml_tensor * rope_positions(ProjectorGraph & g, int64_t px, int64_t py) {
    const int64_t n = px * py;
    std::vector<int32_t> v((size_t) (4 * n));
    int64_t i = 0;
    for (int64_t y = 0; y < py; y += 2) {
        for (int64_t x = 0; x < px; x += 2) {
            for (int64_t dy = 0; dy < 2; ++dy) {
                for (int64_t dx = 0; dx < 2; ++dx, ++i) {
                    v[(size_t) i] = v[(size_t) (2 * n + i)] = (int32_t) (y + dy);
                    v[(size_t) (n + i)] = v[(size_t) (3 * n + i)] = (int32_t) (x + dx);
                }
            }
        }
    }
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, 4 * n);
    ggml_set_input(t);
    g.inputs_i32.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor * attention(ProjectorGraph & g, const VitLayer & L, ggml_tensor * h, ggml_tensor * pos) {
    ggml_context * ctx = g.ctx;
    const int64_t e = g.hp.n_embd, n_head = g.hp.n_head, d = e / n_head, n = h->ne[1];
    ggml_tensor * qkv = g.linear(h, L.qkv_w, L.qkv_b);                          // [3 e, n]
    auto part = [&](int k) {
        return ggml_view_3d(ctx, qkv, d, n_head, n, ggml_row_size(qkv->type, d), qkv->nb[1],
                            ggml_row_size(qkv->type, k * e));
    };
    int sections[GGML_MROPE_SECTIONS] = {(int) d / 4, (int) d / 4, (int) d / 4, (int) d / 4};
    auto rope = [&](ggml_tensor * x) {
        return ggml_rope_multi(ctx, x, pos, nullptr, (int) d / 2, sections, GGML_ROPE_TYPE_VISION, 32768, 10000.0f,
                               1.0f, 0.0f, 1.0f, 32.0f, 1.0f);
    };
    ggml_tensor * q = ggml_permute(ctx, rope(part(0)), 0, 2, 1, 3);             // [d, n, n_head]
    ggml_tensor * k = ggml_cast(ctx, ggml_permute(ctx, rope(part(1)), 0, 2, 1, 3), GGML_TYPE_F16);
    ggml_tensor * v = ggml_cast(ctx, ggml_permute(ctx, part(2), 0, 2, 1, 3), GGML_TYPE_F16);
    // as clip.cpp where the backend has flash attention (its default): F16 K and V, F32 sums
    ggml_tensor * a = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f / sqrtf((float) d), 0.0f, 0.0f);
    ggml_prec_set_acc(a, GGML_PREC_F32);
    return g.linear(ggml_reshape_2d(ctx, a, e, n), L.o_w, L.o_b);
}

// A layer's deepstack merger over its output x ([n_embd, n_patches] in the merge order):
// [n_embd_text, n_patches / 4].
ggml_tensor * deepstack(ProjectorGraph & g, const VitLayer & L, ggml_tensor * x) {
    ggml_tensor * f = ggml_reshape_2d(g.ctx, x, 4 * g.hp.n_embd, x->ne[1] / 4);   // 2 x 2 patches a row
    f = g.layer_norm(f, L.ds_norm_w, L.ds_norm_b);
    f = ggml_gelu(g.ctx, g.linear(f, L.ds_fc1_w, L.ds_fc1_b));
    return g.linear(f, L.ds_fc2_w, L.ds_fc2_b);
}

ggml_tensor * build(ProjectorGraph & g) {
    ggml_context * ctx = g.ctx;
    const int p = g.hp.patch_size;
    const int64_t e = g.hp.n_embd, px = g.width / p, py = g.height / p;
    // a still image: both temporal slices of the Conv3D see the same frame
    ggml_tensor * x = ggml_add(ctx, ggml_conv_2d(ctx, g.w.patch_w, g.inp_raw, p, p, 0, 0, 1, 1),
                               ggml_conv_2d(ctx, g.w.patch_w1, g.inp_raw, p, p, 0, 0, 1, 1));   // [px, py, e]
    x = merge_order(ctx, ggml_permute(ctx, x, 1, 2, 0, 3), e, px, py);
    x = ggml_add(ctx, x, g.w.patch_b);
    x = ggml_add(ctx, x, merge_order(ctx, positions_embd(g, px, py), e, px, py));
    ggml_tensor * pos = rope_positions(g, px, py);
    ggml_tensor * stack = nullptr;   // the deepstack mergers' rows, concatenated in layer order
    for (const VitLayer & L : g.w.layers) {
        x = ggml_add(ctx, attention(g, L, g.layer_norm(x, L.ln1_w, L.ln1_b), pos), x);
        ggml_tensor * h = ggml_gelu(ctx, g.linear(g.layer_norm(x, L.ln2_w, L.ln2_b), L.up_w, L.up_b));
        x = ggml_add(ctx, x, g.linear(h, L.down_w, L.down_b));
        if (L.ds_fc1_w) {
            ggml_tensor * f = deepstack(g, L, x);
            stack = stack ? ggml_concat(ctx, stack, f, 0) : f;
        }
    }
    if (g.w.post_ln_w) x = g.layer_norm(x, g.w.post_ln_w, g.w.post_ln_b);
    x = ggml_reshape_2d(ctx, x, 4 * e, px * py / 4);                            // 2 x 2 patches a row
    x = ggml_gelu(ctx, g.linear(x, g.w.mm0_w, g.w.mm0_b));
    x = g.linear(x, g.w.mm2_w, g.w.mm2_b);                                      // [n_embd_text, n_tokens]
    return stack ? ggml_concat(ctx, x, stack, 0) : x;                           // [row_width, n_tokens]
}

// Rectangles of whole 2 x 2 patch blocks (the smart resize makes them).
void grid(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny) {
    const int64_t unit = (int64_t) hp.patch_size * kMerge;
    if (width <= 0 || height <= 0 || width > kMostSide || height > kMostSide || width % unit || height % unit) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the projector takes images whose sides are positive multiples of %lld "
             "pixels (patch_size %d x merge %d), at most %lld; got %lldx%lld", (long long) unit, hp.patch_size, kMerge,
             (long long) kMostSide, (long long) width, (long long) height);
    }
    if ((width / hp.patch_size) * (height / hp.patch_size) > kMostPatches) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a %lldx%lld image is %lld patches, over the %lld the encoder takes",
             (long long) width, (long long) height,
             (long long) ((width / hp.patch_size) * (height / hp.patch_size)), (long long) kMostPatches);
    }
    nx = (int32_t) (width / unit);
    ny = (int32_t) (height / unit);
}

}  // namespace

extern const ProjectorOps projector_qwen3vl = {"qwen3vl_merger", /*non_causal =*/ false, /*mrope =*/ true, hparams,
                                               tensors, build, grid};

}  // namespace psl
