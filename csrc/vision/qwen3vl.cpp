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

// The learned positions (a square grid) resized to px x py: [n_embd, px, py].
ggml_tensor * positions_embd(ProjectorGraph & g, int64_t px, int64_t py) {
    const int64_t e = g.hp.n_embd, side = g.hp.patches_side();
    ggml_tensor * pos = ggml_reshape_3d(g.ctx, g.w.pos, e, side, side);
    if (px == side && py == side) return pos;
    pos = ggml_permute(g.ctx, pos, 2, 0, 1, 3);                                 // [side, side, e]
    pos = ggml_interpolate(g.ctx, pos, px, py, e, 1, GGML_SCALE_MODE_BILINEAR | GGML_SCALE_FLAG_ALIGN_CORNERS);
    return ggml_permute(g.ctx, pos, 1, 2, 0, 3);                                // [e, px, py]
}

ggml_tensor * attention(ProjectorGraph & g, const VitLayer & L, ggml_tensor * h, ggml_tensor * pos) {
    ggml_context * ctx = g.ctx;
    const int64_t e = g.hp.n_embd, n_head = g.hp.n_head, d = e / n_head, n = h->ne[1];
    ggml_tensor * qkv = g.linear(h, L.qkv_w, L.qkv_b);                          // [3 e, n]
    auto part = [&](int k) {
        return ggml_view_3d(ctx, qkv, d, n_head, n, ggml_row_size(qkv->type, d), qkv->nb[1],
                            ggml_row_size(qkv->type, k * e));
    };
    ggml_tensor * a = g.attention(g.vision_rope(part(0), pos), g.vision_rope(part(1), pos), part(2), nullptr);
    return g.linear(a, L.o_w, L.o_b);
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
    ggml_tensor * x = ggml_add(ctx, g.temporal_patches(px, py), g.w.patch_b);
    x = ggml_add(ctx, x, g.merge_order(positions_embd(g, px, py), px, py));
    ggml_tensor * pos = g.rope_positions(px, py);
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
    grid_2x2(hp, width, height, kMostPatches, nx, ny);
}

}  // namespace

extern const ProjectorOps projector_qwen3vl = {"qwen3vl_merger", /*non_causal =*/ false, /*mrope =*/ true, hparams,
                                               tensors, build, grid};

}  // namespace psl
