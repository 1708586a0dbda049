// Gemma 4's projector (clip.projector_type "gemma4v"), as llama.cpp b11434's tools/mtmd runs it
// (clip.cpp's hparams and tensors, models/gemma4v.cpp's graph): pixels taken to [-1, 1], patches
// by a convolution without bias, learned x and y positions from two lookup tables; a ViT with RMS
// norms, per-head q / k norms, v RMS-normed without weight, 2-D NEOX rope (x on the first half
// of each head, y on the second, base 100), kq scale 1, norms after attention and FFN, a gated
// FFN; average pooling by n_merge (3 by default), times sqrt(n_embd), the optional std_bias /
// std_scale, an RMS norm and the input projection. Products whose weight has input_min / _max,
// output_min / _max scalars are clamped as Gemma4ClippableLinear. Rectangles: mtmd's dyn-size
// resize, multiples of patch_size * n_merge, at most as many patches a side as the tables hold.
// In the text model the rows attend to each other both ways, except for E2B / E4B (their width,
// 1536 or 2560: mtmd_decode_use_non_causal).
#include "vision/projector.h"

#include "error.h"
#include "gguf/gguf_file.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace psl {

namespace {

constexpr int64_t kMostPatches = 1 << 16;   // patches an image: the attention is n x n

void hparams(const GgufFile & f, VitHParams & hp) {
    const int64_t merge = f.get_int("clip.vision.projector.scale_factor", 3);   // pooling_kernel_size
    if (merge <= 0 || merge > 64) {
        fail(PSL_ERR_FORMAT, "'%s': projector scale_factor %lld is outside [1, 64]", f.path().c_str(), (long long) merge);
    }
    hp.n_merge = (int32_t) merge;
    hp.rope_theta = 100.0f;
    if ((hp.n_embd / hp.n_head) % 4 != 0) {
        fail(PSL_ERR_FORMAT, "'%s': the head size %d is not a multiple of 4 (two rope halves of pairs)",
             f.path().c_str(), hp.n_embd / hp.n_head);
    }
    // image_size is unused by the type (the converter writes 224); the square n_tokens() reports
    // is the largest multiple of a token's side within it
    const int32_t align = hp.patch_size * hp.n_merge;
    hp.image_size = std::max(align, hp.image_size / align * align);
}

// A weight with the bounds of its Gemma4ClippableLinear, where the file gives any.
ggml_tensor * clipped(ProjectorLoader & l, VitWeights & w, const std::string & name, std::vector<int64_t> ne,
                      bool required = true) {
    ggml_tensor * t = l.get(name, std::move(ne), required);
    if (!t) return nullptr;
    const std::string stem = name.substr(0, name.size() - std::string(".weight").size());
    VitClamp c{t, -FLT_MAX, FLT_MAX, -FLT_MAX, FLT_MAX};
    bool any = false;
    any |= l.scalar(stem + ".input_min", c.in_min);
    any |= l.scalar(stem + ".input_max", c.in_max);
    any |= l.scalar(stem + ".output_min", c.out_min);
    any |= l.scalar(stem + ".output_max", c.out_max);
    if (!(c.in_min <= c.in_max) || !(c.out_min <= c.out_max)) {
        fail(PSL_ERR_FORMAT, "'%s': bad clamp bounds (a min above its max, or NaN)", name.c_str());
    }
    if (any) w.clamps.push_back(c);
    return t;
}

void layer_tensors(ProjectorLoader & l, VitWeights & w, const VitHParams & hp, int il) {
    const int64_t e = hp.n_embd, d = hp.n_embd / hp.n_head, ff = hp.n_ff;
    VitLayer & L = w.layers[(size_t) il];
    const std::string b = "v.blk." + std::to_string(il) + ".";
    L.q_w = clipped(l, w, b + "attn_q.weight", {e, e});
    L.k_w = clipped(l, w, b + "attn_k.weight", {e, e});
    L.v_w = clipped(l, w, b + "attn_v.weight", {e, e});
    L.o_w = clipped(l, w, b + "attn_out.weight", {e, e});
    L.q_b = l.get(b + "attn_q.bias", {e}, false);
    L.k_b = l.get(b + "attn_k.bias", {e}, false);
    L.v_b = l.get(b + "attn_v.bias", {e}, false);
    L.o_b = l.get(b + "attn_out.bias", {e}, false);
    L.q_norm = l.get(b + "attn_q_norm.weight", {d}, false);
    L.k_norm = l.get(b + "attn_k_norm.weight", {d}, false);
    L.attn_post_norm = l.get(b + "attn_post_norm.weight", {e}, false);
    L.ffn_post_norm = l.get(b + "ffn_post_norm.weight", {e}, false);
    L.up_w = clipped(l, w, b + "ffn_up.weight", {e, ff});
    L.up_b = l.get(b + "ffn_up.bias", {ff}, false);
    L.gate_w = clipped(l, w, b + "ffn_gate.weight", {e, ff}, false);
    L.gate_b = l.get(b + "ffn_gate.bias", {ff}, false);
    L.down_w = clipped(l, w, b + "ffn_down.weight", {ff, e});
    L.down_b = l.get(b + "ffn_down.bias", {e}, false);
    L.out_scale = l.get(b + "out_scale.weight", {1}, false);
}

void tensors(ProjectorLoader & l, VitWeights & w, VitHParams & hp) {
    const int64_t e = hp.n_embd, p = hp.patch_size;
    w.patch_w = l.get_plain("v.patch_embd.weight", {p, p, 3, e});
    // two tables [n_embd, pos_size] (x then y), F32 as the converter forces
    const ggml_tensor * pos = l.meta("v.position_embd.weight");
    if (pos->ne[1] <= 0 || pos->ne[1] > kMostPatches) fail(PSL_ERR_FORMAT, "bad position table size %lld", (long long) pos->ne[1]);
    w.pos = l.get_plain("v.position_embd.weight", {e, pos->ne[1], 2});
    if (w.pos->type != GGML_TYPE_F32) fail(PSL_ERR_UNSUPPORTED, "the position tables must be f32");
    hp.pos_size = (int32_t) pos->ne[1];
    vit_norms(l, w, hp);
    for (int il = 0; il < hp.n_layer; ++il) layer_tensors(l, w, hp, il);
    w.std_bias = l.get("v.std_bias", {e}, false);
    w.std_scale = l.get("v.std_scale", {e}, false);
    // [n_embd, n_embd_text]: the text model's width is the file's to say (clip_n_mmproj_embd)
    const int64_t n_text = l.meta("mm.input_projection.weight")->ne[1];
    if (n_text <= 0 || n_text > (1 << 20)) fail(PSL_ERR_FORMAT, "projection to a width of %lld", (long long) n_text);
    hp.n_embd_text = (int32_t) n_text;
    w.mm_proj_w = clipped(l, w, "mm.input_projection.weight", {e, n_text});
    hp.causal = n_text == 1536 || n_text == 2560;   // E2B / E4B (mtmd_decode_use_non_causal)
}

// w times x, clamped as the weight's Gemma4ClippableLinear says (build_mm).
ggml_tensor * mm(const ProjectorGraph & g, ggml_tensor * w, ggml_tensor * x, ggml_tensor * b = nullptr) {
    for (const VitClamp & c : g.w.clamps) {
        if (c.w != w) continue;
        x = ggml_clamp(g.ctx, ggml_mul_mat(g.ctx, w, ggml_clamp(g.ctx, x, c.in_min, c.in_max)), c.out_min, c.out_max);
        return b ? ggml_add(g.ctx, x, b) : x;
    }
    return g.linear(x, w, b);
}

ggml_tensor * rms(const ProjectorGraph & g, ggml_tensor * x, ggml_tensor * w) {
    x = ggml_rms_norm(g.ctx, x, g.hp.eps);
    return w ? ggml_mul(g.ctx, x, w) : x;
}

// x on dims [0, d/2) of each head, y on [d/2, d), NEOX pairs within each half.
ggml_tensor * rope_2d(const ProjectorGraph & g, ggml_tensor * t, ggml_tensor * pos_x, ggml_tensor * pos_y) {
    const int half = (int) t->ne[0] / 2;
    const float base = g.hp.rope_theta;
    t = ggml_rope_ext(g.ctx, t, pos_x, nullptr, half, GGML_ROPE_TYPE_NEOX, 0, base, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    t = ggml_rope_ext(g.ctx, t, pos_y, nullptr, half, GGML_ROPE_TYPE_NEOX, 0, base, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f);
    return ggml_rope_set_offset(t, half);
}

ggml_tensor * block(const ProjectorGraph & g, const VitLayer & L, ggml_tensor * x, ggml_tensor * px, ggml_tensor * py) {
    ggml_context * ctx = g.ctx;
    const int64_t n = x->ne[1], nh = g.hp.n_head, d = g.hp.n_embd / nh;
    ggml_tensor * h = rms(g, x, L.ln1_w);
    if (L.ln1_b) h = ggml_add(ctx, h, L.ln1_b);
    ggml_tensor * q = ggml_reshape_3d(ctx, mm(g, L.q_w, h, L.q_b), d, nh, n);
    ggml_tensor * k = ggml_reshape_3d(ctx, mm(g, L.k_w, h, L.k_b), d, nh, n);
    ggml_tensor * v = ggml_reshape_3d(ctx, mm(g, L.v_w, h, L.v_b), d, nh, n);
    if (L.q_norm) q = rms(g, q, L.q_norm);
    if (L.k_norm) k = rms(g, k, L.k_norm);
    q = rope_2d(g, q, px, py);
    k = rope_2d(g, k, px, py);
    v = ggml_rms_norm(ctx, v, g.hp.eps);
    h = mm(g, L.o_w, g.attention(q, k, v, nullptr, 1.0f), L.o_b);
    if (L.attn_post_norm) h = rms(g, h, L.attn_post_norm);
    x = ggml_add(ctx, h, x);
    h = rms(g, x, L.ln2_w);
    if (L.ln2_b) h = ggml_add(ctx, h, L.ln2_b);
    ggml_tensor * up = mm(g, L.up_w, h, L.up_b);
    const VitHParams::Ffn f = g.hp.ffn;
    if (L.gate_w) {   // act(gate) * up
        ggml_tensor * gate = mm(g, L.gate_w, h, L.gate_b);
        h = f == VitHParams::Ffn::Gelu ? ggml_geglu_split(ctx, gate, up)
          : f == VitHParams::Ffn::Silu ? ggml_swiglu_split(ctx, gate, up)
                                       : ggml_geglu_quick_split(ctx, gate, up);
    } else {
        h = f == VitHParams::Ffn::Gelu ? ggml_gelu(ctx, up) : f == VitHParams::Ffn::Silu ? ggml_silu(ctx, up)
                                                                                       : ggml_gelu_quick(ctx, up);
    }
    h = mm(g, L.down_w, h, L.down_b);
    if (L.ffn_post_norm) h = rms(g, h, L.ffn_post_norm);
    x = ggml_add(ctx, x, h);
    return L.out_scale ? ggml_mul(ctx, x, L.out_scale) : x;
}

// The patches' column and row (clip.cpp's pos_x / pos_y), inputs set once the graph is allocated.
ggml_tensor * positions(ProjectorGraph & g, int64_t n, int64_t cols, bool rows) {
    ggml_tensor * t = ggml_new_tensor_1d(g.ctx, GGML_TYPE_I32, n);
    ggml_set_input(t);
    std::vector<int32_t> v((size_t) n);
    for (int64_t i = 0; i < n; ++i) v[(size_t) i] = (int32_t) (rows ? i / cols : i % cols);
    g.inputs_i32.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor * build(ProjectorGraph & g) {
    ggml_context * ctx = g.ctx;
    const VitHParams & hp = g.hp;
    const int64_t e = hp.n_embd, p = hp.patch_size, k = hp.n_merge;
    const int64_t nx = g.width / p, ny = g.height / p, n = nx * ny;
    ggml_tensor * x = ggml_scale_bias(ctx, g.inp_raw, 2.0f, -1.0f);
    x = ggml_conv_2d(ctx, g.w.patch_w, x, (int) p, (int) p, 0, 0, 1, 1);       // [nx, ny, n_embd]
    x = ggml_cont(ctx, ggml_transpose(ctx, ggml_reshape_2d(ctx, x, n, e)));     // [n_embd, n]
    ggml_tensor * px = positions(g, n, nx, false), * py = positions(g, n, nx, true);
    const int64_t size = g.w.pos->ne[1];
    const size_t nb1 = ggml_row_size(g.w.pos->type, e);
    x = ggml_add(ctx, x, ggml_get_rows(ctx, ggml_view_2d(ctx, g.w.pos, e, size, nb1, 0), px));
    x = ggml_add(ctx, x, ggml_get_rows(ctx, ggml_view_2d(ctx, g.w.pos, e, size, nb1, size * nb1), py));
    for (const VitLayer & L : g.w.layers) x = block(g, L, x, px, py);
    if (g.w.post_ln_w) {
        x = rms(g, x, g.w.post_ln_w);
        if (g.w.post_ln_b) x = ggml_add(ctx, x, g.w.post_ln_b);
    }
    x = ggml_cont_3d(ctx, ggml_transpose(ctx, x), nx, ny, e);                   // the pooler
    x = ggml_pool_2d(ctx, x, GGML_OP_POOL_AVG, (int) k, (int) k, (int) k, (int) k, 0, 0);
    x = ggml_reshape_2d(ctx, x, (nx / k) * (ny / k), e);
    x = ggml_scale(ctx, ggml_cont(ctx, ggml_transpose(ctx, x)), sqrtf((float) e));
    if (g.w.std_bias && g.w.std_scale) x = ggml_mul(ctx, ggml_sub(ctx, x, g.w.std_bias), g.w.std_scale);
    return mm(g, g.w.mm_proj_w, ggml_rms_norm(ctx, x, hp.eps));
}

// Multiples of patch_size * n_merge (mtmd's dyn-size resize makes them), within the tables.
void grid(const VitHParams & hp, int64_t width, int64_t height, int32_t & nx, int32_t & ny) {
    const int64_t a = (int64_t) hp.patch_size * hp.n_merge;
    if (width <= 0 || height <= 0 || width % a != 0 || height % a != 0) {
        fail(PSL_ERR_INVALID_ARGUMENT, "the projector takes images whose sides are multiples of %lld pixels "
             "(preprocessed), got %lldx%lld", (long long) a, (long long) width, (long long) height);
    }
    const int64_t cx = width / hp.patch_size, cy = height / hp.patch_size;
    if (cx > hp.pos_size || cy > hp.pos_size || cx * cy > kMostPatches) {
        fail(PSL_ERR_INVALID_ARGUMENT, "a %lldx%lld image is %lld x %lld patches: the projector's position tables "
             "hold %d a side (and %lld patches an image)", (long long) width, (long long) height, (long long) cx,
             (long long) cy, hp.pos_size, (long long) kMostPatches);
    }
    nx = (int32_t) (cx / hp.n_merge), ny = (int32_t) (cy / hp.n_merge);
}

}  // namespace

extern const ProjectorOps projector_gemma4v = {"gemma4v", /*non_causal =*/ true, /*mrope =*/ false, hparams,
                                               tensors, build, grid};

}  // namespace psl
