// Pixtral's and Mistral Small 3.x's projector (clip.projector_type "pixtral"), as llama.cpp
// b11434's tools/mtmd runs it (clip.cpp's hparams, tensors and inputs, models/pixtral.cpp's graph):
// patches by a strided convolution (any rectangle of whole patches), no learned positions, an
// optional RMS pre-norm; pre-norm blocks with RMS norms, separate q, k, v and a 2-D rope (the first
// half of each head's dimensions rotated by the patch's row, the second half by its column, at
// the odd frequencies); Mistral Small 3.1's patch merger where the file has one (RMS norm, each
// n_merge x n_merge block of patches unfolded into one vector, a projection back to n_embd); the
// LLaVA projector (mm.1, GELU, mm.2); then the [IMG_BREAK] embedding after each row of the grid
// but the last.
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

#include <cmath>

namespace psl {

namespace {

constexpr float kRopeTheta = 10000.0f;   // clip.cpp's rope_theta for pixtral (no key)
constexpr int64_t kMostPatches = 1 << 16;   // patches an image: the attention is n x n
constexpr int64_t kMostSide = 1 << 14;      // pixels a side

void hparams(const GgufFile & f, VitHParams & hp) {
    const char * path = f.path().c_str();
    const int64_t merge = f.get_int("clip.vision.spatial_merge_size", 1);   // the original Pixtral: none
    if (merge < 1 || merge > 16) {
        fail(PSL_ERR_FORMAT, "'%s': spatial_merge_size %lld is outside [1, 16]", path, (long long) merge);
    }
    hp.n_merge = (int32_t) merge;
    hp.rms_norm = true;
    if ((hp.n_embd / hp.n_head) % 4 != 0) {   // each half of a head is rotated in pairs
        fail(PSL_ERR_FORMAT, "'%s': the head size %d is not a multiple of 4 (the 2-D rope's two halves)", path,
             hp.n_embd / hp.n_head);
    }
}

void block_tensors(ProjectorLoader & l, VitLayer & L, const std::string & b, int64_t e, int64_t f) {
    L.q_w = l.get(b + "attn_q.weight", {e, e});
    L.k_w = l.get(b + "attn_k.weight", {e, e});
    L.v_w = l.get(b + "attn_v.weight", {e, e});
    L.o_w = l.get(b + "attn_out.weight", {e, e});
    L.q_b = l.get(b + "attn_q.bias", {e}, false);
    L.k_b = l.get(b + "attn_k.bias", {e}, false);
    L.v_b = l.get(b + "attn_v.bias", {e}, false);
    L.o_b = l.get(b + "attn_out.bias", {e}, false);
    L.up_w = l.get(b + "ffn_up.weight", {e, f});
    L.up_b = l.get(b + "ffn_up.bias", {f}, false);
    // present means required: an optional matrix of another shape would be skipped silently
    L.gate_w = l.has(b + "ffn_gate.weight") ? l.get(b + "ffn_gate.weight", {e, f}) : nullptr;
    L.gate_b = l.get(b + "ffn_gate.bias", {f}, false);
    L.down_w = l.get(b + "ffn_down.weight", {f, e});
    L.down_b = l.get(b + "ffn_down.bias", {e}, false);
}

void tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    const int64_t e = hp.n_embd, p = hp.patch_size, m = hp.n_merge;
    w.patch_w = l.get_plain("v.patch_embd.weight", {p, p, 3, e});
    w.patch_b = l.get("v.patch_embd.bias", {e}, false);
    w.pre_ln_w = l.get("v.pre_ln.weight", {e}, false);
    vit_norms(l, w, hp);
    for (int il = 0; il < hp.n_layer; ++il) {
        block_tensors(l, w.layers[(size_t) il], "v.blk." + std::to_string(il) + ".", e, hp.n_ff);
    }
    const char * merger = "mm.patch_merger.weight";   // of another merge size: a shape error
    w.mm_merger_w = l.has(merger) ? l.get(merger, {e * m * m, e}) : nullptr;
    if (w.mm_merger_w) {
        w.mm_input_norm_w = l.get("mm.input_norm.weight", {e});   // the merger's graph multiplies by it
    } else if (m > 1) {   // clip.cpp counts merged rows but its graph would not merge
        fail(PSL_ERR_FORMAT, "a pixtral projector with spatial_merge_size %lld and no mm.patch_merger.weight",
             (long long) m);
    }
    const int64_t h = l.meta("mm.1.weight")->ne[1], n_text = l.meta("mm.2.weight")->ne[1];
    if (h <= 0 || h > (1 << 20) || n_text <= 0 || n_text > (1 << 20)) {
        fail(PSL_ERR_FORMAT, "a projector of widths %lld, %lld", (long long) h, (long long) n_text);
    }
    hp.n_embd_text = (int32_t) n_text;
    w.mm1_w = l.get("mm.1.weight", {e, h});
    w.mm1_b = l.get("mm.1.bias", {h}, false);
    w.mm2_w = l.get("mm.2.weight", {h, n_text});
    w.mm2_b = l.get("mm.2.bias", {n_text}, false);
    w.img_break = l.get("v.token_embd.img_break", {n_text});   // clip.cpp requires it
}

ggml_tensor * rms(ProjectorGraph & g, ggml_tensor * x, ggml_tensor * wt) {
    x = ggml_rms_norm(g.ctx, x, g.hp.eps);
    return wt ? ggml_mul(g.ctx, x, wt) : x;
}

// Each patch's row (h) or column (w) in raster order: the rope's two position inputs.
ggml_tensor * positions(ProjectorGraph & g, int64_t px, int64_t py, bool column) {
    std::vector<int32_t> v((size_t) (px * py));
    for (int64_t i = 0; i < px * py; ++i) v[(size_t) i] = (int32_t) (column ? i % px : i / px);
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, px * py);
    ggml_set_input(t);
    g.inputs_i32.emplace_back(t, std::move(v));
    return t;
}

// clip.cpp's build_rope_2d with interleaved frequencies: dims [0, d/2) rotated by pos_h at the
// even frequencies of d, dims [d/2, d) by pos_w at the odd ones (freq_scale base^(-2/d)).
ggml_tensor * rope_2d(ProjectorGraph & g, ggml_tensor * x, ggml_tensor * pos_h, ggml_tensor * pos_w) {
    const int d = (int) x->ne[0];
    const float odd = std::pow(kRopeTheta, -2.0f / (float) d);
    x = ggml_rope_ext(g.ctx, x, pos_h, nullptr, d / 2, 0, 0, kRopeTheta, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    x = ggml_rope_ext(g.ctx, x, pos_w, nullptr, d / 2, 0, 0, kRopeTheta, odd, 0.0f, 1.0f, 0.0f, 0.0f);
    return ggml_rope_set_offset(x, d / 2);
}

// clip.cpp's build_ffn: act(up), or act(gate) * up where the block has a gate; then down.
ggml_tensor * ffn(ProjectorGraph & g, const VitLayer & L, ggml_tensor * x) {
    using Ffn = VitHParams::Ffn;
    ggml_context * ctx = g.ctx;
    ggml_tensor * up = g.linear(x, L.up_w, L.up_b), * h;
    if (L.gate_w) {
        ggml_tensor * gate = g.linear(x, L.gate_w, L.gate_b);
        h = g.hp.ffn == Ffn::Silu ? ggml_swiglu_split(ctx, gate, up)
          : g.hp.ffn == Ffn::Gelu ? ggml_geglu_split(ctx, gate, up)
                                  : ggml_geglu_quick_split(ctx, gate, up);
    } else {
        h = g.hp.ffn == Ffn::Silu ? ggml_silu(ctx, up) : g.hp.ffn == Ffn::Gelu ? ggml_gelu(ctx, up)
                                                                                : ggml_gelu_quick(ctx, up);
    }
    return g.linear(h, L.down_w, L.down_b);
}

ggml_tensor * block(ProjectorGraph & g, const VitLayer & L, ggml_tensor * x, ggml_tensor * pos_h,
                    ggml_tensor * pos_w) {
    ggml_context * ctx = g.ctx;
    const int64_t e = g.hp.n_embd, n_head = g.hp.n_head, d = e / n_head, n = x->ne[1];
    ggml_tensor * h = rms(g, x, L.ln1_w);
    ggml_tensor * q = ggml_reshape_3d(ctx, g.linear(h, L.q_w, L.q_b), d, n_head, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, g.linear(h, L.k_w, L.k_b), d, n_head, n);
    ggml_tensor * v = ggml_reshape_3d(ctx, g.linear(h, L.v_w, L.v_b), d, n_head, n);
    ggml_tensor * a = g.attention(rope_2d(g, q, pos_h, pos_w), rope_2d(g, k, pos_h, pos_w), v, nullptr);
    x = ggml_add(ctx, g.linear(a, L.o_w, L.o_b), x);
    return ggml_add(ctx, x, ffn(g, L, rms(g, x, L.ln2_w)));
}

// Mistral Small 3.1's merger: each m x m block of patches (im2col over the [px, py, e] grid, its
// vector ordered as torch's unfold) projected back to n_embd: [e, px * py] -> [e, px/m * py/m].
ggml_tensor * merge(ProjectorGraph & g, ggml_tensor * x, int64_t px, int64_t py) {
    ggml_context * ctx = g.ctx;
    const int m = g.hp.n_merge;
    const int64_t e = g.hp.n_embd;
    x = rms(g, x, g.w.mm_input_norm_w);
    x = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, x, e, px, py), 2, 0, 1, 3));   // [px, py, e]
    ggml_tensor * kernel = ggml_view_3d(ctx, x, m, m, e, 0, 0, 0);   // only its shape is read
    x = ggml_im2col(ctx, kernel, x, m, m, 0, 0, 1, 1, true, GGML_TYPE_F32);
    x = ggml_reshape_2d(ctx, x, x->ne[0], x->ne[1] * x->ne[2]);
    return ggml_mul_mat(ctx, g.w.mm_merger_w, x);
}

ggml_tensor * build(ProjectorGraph & g) {
    ggml_context * ctx = g.ctx;
    const int p = g.hp.patch_size, m = g.hp.n_merge;
    const int64_t e = g.hp.n_embd, px = g.width / p, py = g.height / p, n = px * py;
    ggml_tensor * x = ggml_conv_2d(ctx, g.w.patch_w, g.inp_raw, p, p, 0, 0, 1, 1);   // [px, py, e]
    x = ggml_cont(ctx, ggml_transpose(ctx, ggml_reshape_2d(ctx, x, n, e)));          // [e, n], raster order
    if (g.w.patch_b) x = ggml_add(ctx, x, g.w.patch_b);
    if (g.w.pre_ln_w) x = rms(g, x, g.w.pre_ln_w);
    ggml_tensor * pos_h = positions(g, px, py, false), * pos_w = positions(g, px, py, true);
    for (const VitLayer & L : g.w.layers) x = block(g, L, x, pos_h, pos_w);
    if (g.w.post_ln_w) x = rms(g, x, g.w.post_ln_w);
    if (g.w.mm_merger_w) x = merge(g, x, px, py);
    x = g.linear(ggml_gelu(ctx, g.linear(x, g.w.mm1_w, g.w.mm1_b)), g.w.mm2_w, g.w.mm2_b);
    // the break row after each grid row: [t, nx, ny] ++ [t, 1, ny], the last one dropped
    const int64_t t = g.hp.n_embd_text, nx = px / m, ny = py / m;
    ggml_tensor * brk = ggml_repeat(ctx, g.w.img_break, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, t, 1, ny));
    x = ggml_concat(ctx, ggml_reshape_3d(ctx, x, t, nx, ny), brk, 1);
    return ggml_cont(ctx, ggml_view_2d(ctx, x, t, nx * ny + ny - 1, x->nb[1], 0));
}

// Rectangles of whole n_merge x n_merge patch blocks (mtmd's resize makes them); the rows are the
// grid nx x ny and ny - 1 breaks.
void grid(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny) {
    const int64_t unit = (int64_t) hp.patch_size * hp.n_merge;
    if (width <= 0 || height <= 0 || width > kMostSide || height > kMostSide || width % unit || height % unit) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the pixtral projector takes images whose sides are positive multiples of "
             "%lld pixels (patch_size %d x merge %d), at most %lld; got %lldx%lld", (long long) unit, hp.patch_size,
             hp.n_merge, (long long) kMostSide, (long long) width, (long long) height);
    }
    const int64_t n = (width / hp.patch_size) * (height / hp.patch_size);
    if (n > kMostPatches) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a %lldx%lld image is %lld patches, over the %lld the encoder takes",
             (long long) width, (long long) height, (long long) n, (long long) kMostPatches);
    }
    nx = (int32_t) (width / unit);
    ny = (int32_t) (height / unit);
}

}  // namespace

extern const ProjectorOps projector_pixtral = {"pixtral", /*non_causal =*/ false, /*mrope =*/ false,
                                               hparams, tensors, build, grid, /*row_breaks =*/ true};

}  // namespace psl
